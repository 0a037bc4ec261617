#include "ddprun/rendezvous/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ddprun::rendezvous {

JobSecret JobSecret::fromBytes(std::string bytes, const std::string& origin) {
  if (bytes.size() < kMinBytes) {
    throw TokenFileError(fmt::format(
        "{} holds {} bytes, fewer than the {} a token needs; write a long random one, e.g. "
        "`openssl rand -hex 32 > FILE && chmod 600 FILE`",
        origin, bytes.size(), kMinBytes));
  }
  return JobSecret(std::move(bytes));
}

JobSecret readTokenFile(const std::string& path) {
  // O_NOFOLLOW is not used: a token kept behind a symlink (a Kubernetes secret volume) is common;
  // the mode checked is the file's own, after fstat of what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw TokenFileError(fmt::format("cannot read the token file {}: {}{}", path, std::strerror(error),
                                     error == ENOENT ? " (give the path of the job's token file)"
                                                     : ""));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw TokenFileError(fmt::format("the token file {} is not a regular file", path));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw TokenFileError(fmt::format(
        "the token file {} can be read by other users (mode {:03o}); run `chmod 600 {}`", path,
        info.st_mode & 0777, path));
  }
  // A token is short; anything large is not one (and must not be read whole into memory).
  constexpr std::size_t kMaxBytes = 64 * 1024;
  std::string bytes(kMaxBytes + 1, '\0');
  std::size_t size = 0;
  for (;;) {
    const ssize_t got = ::read(fd, bytes.data() + size, bytes.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      throw TokenFileError(fmt::format("cannot read the token file {}: {}", path, std::strerror(errno)));
    }
    if (got == 0) break;
    size += static_cast<std::size_t>(got);
    if (size > kMaxBytes) {
      throw TokenFileError(fmt::format("the token file {} is over {} bytes: it is not a token", path,
                                       kMaxBytes));
    }
  }
  bytes.resize(size);
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                            bytes.back() == '\t')) {
    bytes.pop_back();
  }
  return JobSecret::fromBytes(std::move(bytes), fmt::format("the token file {}", path));
}

}  // namespace ddprun::rendezvous
