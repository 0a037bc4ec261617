#include "auth/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ddprun::rendezvous::auth {

std::string readPrivateFile(const std::string& path, std::string_view what, std::size_t maxBytes) {
  // O_NOFOLLOW is not used: a secret kept behind a symlink (a Kubernetes secret volume) is
  // common; the mode checked is the file's own, after fstat of what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw PrivateFileError(fmt::format("cannot read the {} {}: {}{}", what, path, std::strerror(error),
                                       error == ENOENT ? fmt::format(" (give the path of the job's {})", what)
                                                       : ""));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw PrivateFileError(fmt::format("the {} {} is not a regular file", what, path));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw PrivateFileError(fmt::format("the {} {} can be read by other users (mode {:03o}); run `chmod 600 {}`",
                                       what, path, info.st_mode & 0777, path));
  }
  std::string bytes(maxBytes + 1, '\0');
  std::size_t size = 0;
  for (;;) {
    const ssize_t got = ::read(fd, bytes.data() + size, bytes.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      throw PrivateFileError(fmt::format("cannot read the {} {}: {}", what, path, std::strerror(errno)));
    }
    if (got == 0) break;
    size += static_cast<std::size_t>(got);
    if (size > maxBytes) {
      throw PrivateFileError(fmt::format("the {} {} is over {} bytes: it is not a {}", what, path,
                                         maxBytes, what));
    }
  }
  bytes.resize(size);
  return bytes;
}

}  // namespace ddprun::rendezvous::auth
