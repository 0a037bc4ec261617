#include "auth/private_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "ddprun/common/safe_files.h"

namespace ddprun::rendezvous::auth {

std::string readPrivateFile(const std::string& path, std::string_view what, std::size_t maxBytes) {
  // Links are followed: a secret kept behind a symlink (a Kubernetes secret volume) is common; the
  // owner and mode checked are the file's own, after fstat of what was opened. The open does not
  // block (a FIFO at the path is refused, not waited on).
  auto opened = common::openForReading(path, common::Links::kFollow);
  if (!opened) {
    const common::FileError& error = opened.error();
    if (error.problem == common::FileProblem::kNotRegular) {
      throw PrivateFileError(
          fmt::format("the {} {} {}; give the path of a regular file (mode 600) that holds it",
                      what, path, error.describe()));
    }
    throw PrivateFileError(
        fmt::format("cannot read the {} {}: {}{}", what, path, error.describe(),
                    error.problem == common::FileProblem::kSystem && error.error == ENOENT
                        ? fmt::format(" (give the path of the job's {})", what)
                        : ""));
  }
  const struct stat& info = opened->info;
  // Whoever owns the file can read and change the secret whatever its mode (ssh refuses such a
  // key too): only this user's own file, or root's, is taken.
  if (info.st_uid != ::geteuid() && info.st_uid != 0) {
    throw PrivateFileError(fmt::format(
        "the {} {} belongs to {}, who can read and change it whatever its mode; use a file that "
        "this user or root owns (`chown {} {}`)",
        what, path, common::userText(info.st_uid), common::userName(::geteuid()), path));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw PrivateFileError(
        fmt::format("the {} {} can be read by other users (mode {:03o}); run `chmod 600 {}`", what,
                    path, info.st_mode & 0777, path));
  }
  auto read = common::readOpened(std::move(opened.value()), maxBytes);
  if (!read) {
    throw PrivateFileError(
        fmt::format("cannot read the {} {}: {}", what, path, read.error().describe()));
  }
  if (read->truncated) {
    throw PrivateFileError(
        fmt::format("the {} {} is over {} bytes: it is not a {}", what, path, maxBytes, what));
  }
  return std::move(read->bytes);
}

}  // namespace ddprun::rendezvous::auth
