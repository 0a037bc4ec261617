#include "ddprun/common/safe_files.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

namespace ddprun::common {
namespace {

namespace fs = std::filesystem;

FileError systemError(int error) {
  return FileError{FileProblem::kSystem, error, FileKind::kOther, 0};
}

FileError notRegular(mode_t mode) {
  return FileError{FileProblem::kNotRegular, 0, fileKind(mode), 0};
}

FileError otherOwner(uid_t owner) {
  return FileError{FileProblem::kOtherOwner, 0, FileKind::kOther, owner};
}

FileError symlinkError() { return FileError{FileProblem::kSymlink, ELOOP, FileKind::kSymlink, 0}; }

// open(2) failed with ELOOP under O_NOFOLLOW: the last component is a link (kSymlink), unless
// the ELOOP came from too many links on the way there.
FileError openFailure(const std::string& path, int error, bool noFollow) {
  if (error == ELOOP && noFollow) {
    struct stat info {};
    if (::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) return symlinkError();
  }
  return systemError(error);
}

std::string groupName(gid_t gid) {
  std::array<char, 16384> buffer{};
  group entry{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return {};
}

std::string groupText(gid_t gid) {
  const std::string name = groupName(gid);
  return name.empty() ? "group " + std::to_string(gid)
                      : "group " + std::to_string(gid) + " (" + name + ")";
}

// Whether group `gid` is this user's own group and nobody else is listed in it (a user private
// group, as Debian makes one per user): its write bit then lets no one else in.
bool groupIsOnlyOurs(gid_t gid) {
  if (gid != ::getegid()) return false;
  std::array<char, 16384> buffer{};
  group entry{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  const std::string self = userName(::geteuid());
  for (char** member = found->gr_mem; member != nullptr && *member != nullptr; ++member) {
    if (self != *member) return false;
  }
  return true;
}

bool ownedByUsOrRoot(uid_t owner) { return owner == ::geteuid() || owner == 0; }

// The exposures of one name, as lstat sees it (a link: its owner only; its target is looked at
// on its own, through the resolved path).
void exposuresOf(const std::string& path, const struct stat& info,
                 std::vector<DirectoryExposure>& out) {
  const auto add = [&](Exposure exposure) {
    out.push_back(
        DirectoryExposure{path, exposure, info.st_uid, info.st_gid, info.st_mode & 07777});
  };
  if (!ownedByUsOrRoot(info.st_uid)) add(Exposure::kOwnedByOther);
  if (!S_ISDIR(info.st_mode) || (info.st_mode & S_ISVTX) != 0) return;
  if ((info.st_mode & S_IWOTH) != 0) {
    add(Exposure::kWorldWritable);
  } else if ((info.st_mode & S_IWGRP) != 0 && !groupIsOnlyOurs(info.st_gid)) {
    add(Exposure::kGroupWritable);
  }
}

// Every prefix of an absolute, normal path: "/", "/a", "/a/b".
std::vector<std::string> prefixes(const fs::path& path) {
  std::vector<std::string> out;
  fs::path so_far;
  for (const fs::path& part : path) {
    so_far /= part;
    out.push_back(so_far.string());
  }
  return out;
}

}  // namespace

std::string userName(uid_t uid) {
  std::array<char, 4096> buffer{};
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return std::to_string(uid);
}

std::string userText(uid_t uid) {
  const std::string name = userName(uid);
  return name == std::to_string(uid) ? "uid " + name
                                     : "uid " + std::to_string(uid) + " (" + name + ")";
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileDescriptor::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

FileKind fileKind(mode_t mode) {
  if (S_ISREG(mode)) return FileKind::kRegular;
  if (S_ISDIR(mode)) return FileKind::kDirectory;
  if (S_ISLNK(mode)) return FileKind::kSymlink;
  if (S_ISFIFO(mode)) return FileKind::kFifo;
  if (S_ISSOCK(mode)) return FileKind::kSocket;
  if (S_ISCHR(mode)) return FileKind::kCharDevice;
  if (S_ISBLK(mode)) return FileKind::kBlockDevice;
  return FileKind::kOther;
}

const char* fileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kRegular:
      return "a regular file";
    case FileKind::kDirectory:
      return "a directory";
    case FileKind::kSymlink:
      return "a symbolic link";
    case FileKind::kFifo:
      return "a FIFO";
    case FileKind::kSocket:
      return "a socket";
    case FileKind::kCharDevice:
      return "a character device";
    case FileKind::kBlockDevice:
      return "a block device";
    case FileKind::kOther:
      break;
  }
  return "not a regular file";
}

std::string FileError::describe() const {
  switch (problem) {
    case FileProblem::kSystem:
      return std::strerror(error);
    case FileProblem::kSymlink:
      return "is a symbolic link (not followed)";
    case FileProblem::kNotRegular:
      return std::string("is ") + fileKindName(kind) + ", not a regular file";
    case FileProblem::kOtherOwner:
      return "belongs to " + userText(owner);
    case FileProblem::kHardLinked:
      return "has more than one hard link";
  }
  return "cannot be used";
}

std::error_code FileError::code() const {
  if (problem == FileProblem::kSystem) return {error, std::generic_category()};
  return {static_cast<int>(problem), fileProblemCategory()};
}

const std::error_category& fileProblemCategory() {
  class Category final : public std::error_category {
   public:
    const char* name() const noexcept override { return "ddprun file"; }
    std::string message(int value) const override {
      FileError error;
      error.problem = static_cast<FileProblem>(value);
      // The kind and owner are not in an error_code: the generic wording.
      if (error.problem == FileProblem::kNotRegular) return "is not a regular file";
      if (error.problem == FileProblem::kOtherOwner) return "belongs to another user";
      return error.describe();
    }
  };
  static const Category category;
  return category;
}

FileOutcome<std::string> makePrivateDirectory(std::string pattern) {
  if (::mkdtemp(pattern.data()) == nullptr) return systemError(errno);
  return pattern;
}

std::optional<FileError> ensureOwnDirectory(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0) return std::nullopt;
  const int error = errno;
  if (error != EEXIST) return systemError(error);
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return systemError(errno);
  if (S_ISLNK(info.st_mode)) return symlinkError();
  if (!S_ISDIR(info.st_mode)) return notRegular(info.st_mode);
  if (info.st_uid != ::geteuid()) return otherOwner(info.st_uid);
  return std::nullopt;
}

std::optional<FileError> ensureOwnDirectories(const std::string& path, mode_t mode) {
  std::vector<fs::path> missing;  // from `path` up
  for (fs::path at = fs::path(path).lexically_normal(); !at.empty(); at = at.parent_path()) {
    if (at.filename().empty()) {  // "a/b/": the same directory as "a/b"
      if (at == at.parent_path()) break;
      continue;
    }
    struct stat info {};
    if (::lstat(at.c_str(), &info) == 0) break;
    if (errno != ENOENT) return systemError(errno);
    missing.push_back(at);
  }
  if (missing.empty()) return ensureOwnDirectory(path, mode);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (auto problem = ensureOwnDirectory(it->string(), mode)) return problem;
  }
  return std::nullopt;
}

FileOutcome<FileDescriptor> createNewFile(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return systemError(errno);
  return FileDescriptor(fd);
}

FileOutcome<FileDescriptor> openForAppend(const std::string& path, mode_t mode) {
  // Twice at most: a file removed between the two opens is made anew.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int made =
        ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (made >= 0) return FileDescriptor(made);
    if (errno != EEXIST) return systemError(errno);
    FileDescriptor fd(
        ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) continue;
      // A FIFO without a reader is ENXIO under O_NONBLOCK (not a wait), a directory EISDIR.
      const int error = errno;
      struct stat info {};
      if ((error == ENXIO || error == EISDIR) && ::lstat(path.c_str(), &info) == 0 &&
          !S_ISREG(info.st_mode)) {
        return notRegular(info.st_mode);
      }
      return openFailure(path, error, true);
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) return systemError(errno);
    if (!S_ISREG(info.st_mode)) return notRegular(info.st_mode);
    if (info.st_uid != ::geteuid()) return otherOwner(info.st_uid);
    if (info.st_nlink != 1) return FileError{FileProblem::kHardLinked, 0, FileKind::kRegular, 0};
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    return fd;
  }
  return systemError(ENOENT);
}

std::optional<FileError> writeAll(int fd, std::string_view bytes,
                                  std::optional<std::chrono::milliseconds> stallLimit) {
  using Clock = std::chrono::steady_clock;
  auto lastProgress = Clock::now();
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(written));
      if (stallLimit) lastProgress = Clock::now();
      continue;
    }
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int timeout = -1;
      if (stallLimit) {
        const auto left = *stallLimit - std::chrono::duration_cast<std::chrono::milliseconds>(
                                            Clock::now() - lastProgress);
        if (left.count() <= 0) return systemError(EAGAIN);
        timeout = static_cast<int>(left.count());
      }
      pollfd wait{fd, POLLOUT, 0};
      ::poll(&wait, 1, timeout);
      continue;
    }
    return systemError(written < 0 ? errno : EIO);
  }
  return std::nullopt;
}

std::optional<FileError> writeFileAtomically(const std::string& path, std::string_view content,
                                             mode_t mode) {
  const fs::path target(path);
  // Hidden and beside the target (a rename stays in one file system).
  std::string temporary =
      (target.parent_path() / ("." + target.filename().string() + ".XXXXXX")).string();
  // mkostemp: O_CREAT|O_EXCL under a random name, mode 0600.
  FileDescriptor fd(::mkostemp(temporary.data(), O_CLOEXEC));
  if (!fd) return systemError(errno);
  const auto fail = [&](FileError error) {
    ::unlink(temporary.c_str());
    return error;
  };
  if ((mode & 07777) != 0600 && ::fchmod(fd.get(), mode) != 0) return fail(systemError(errno));
  if (auto error = writeAll(fd.get(), content)) return fail(*error);
  if (::close(fd.release()) != 0) return fail(systemError(errno));
  if (::rename(temporary.c_str(), path.c_str()) != 0) return fail(systemError(errno));
  return std::nullopt;
}

FileOutcome<OpenedFile> openForReading(const std::string& path, Links links) {
  const bool noFollow = links == Links::kRefuse;
  const int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (noFollow ? O_NOFOLLOW : 0);
  OpenedFile file;
  file.fd = FileDescriptor(::open(path.c_str(), flags));
  if (!file.fd) return openFailure(path, errno, noFollow);
  if (::fstat(file.fd.get(), &file.info) != 0) return systemError(errno);
  if (!S_ISREG(file.info.st_mode)) return notRegular(file.info.st_mode);
  const int status = ::fcntl(file.fd.get(), F_GETFL);
  if (status >= 0) ::fcntl(file.fd.get(), F_SETFL, status & ~O_NONBLOCK);
  return file;
}

FileOutcome<FileBytes> readOpened(OpenedFile file, std::size_t limit, std::size_t offset) {
  FileBytes result;
  result.info = file.info;
  const int fd = file.fd.get();
  if (offset > 0 &&
      ::lseek(fd, static_cast<off_t>(std::min<std::size_t>(offset, LLONG_MAX)), SEEK_SET) < 0) {
    return systemError(errno);
  }
  // What the size promises (none for /proc and /sys files), never more than the limit: a huge
  // limit (readFileText's default) allocates nothing up front.
  constexpr std::size_t kChunk = 64 * 1024;
  const auto size = static_cast<std::size_t>(std::max<off_t>(file.info.st_size, 0));
  if (size > offset) result.bytes.reserve(std::min(size - offset, limit));
  std::string& bytes = result.bytes;
  for (;;) {
    const std::size_t want = std::min(kChunk, limit - bytes.size());
    if (want == 0) break;
    const std::size_t had = bytes.size();
    bytes.resize(had + want);
    const ssize_t got = ::read(fd, bytes.data() + had, want);
    if (got < 0) {
      bytes.resize(had);
      if (errno == EINTR) continue;
      return systemError(errno);
    }
    bytes.resize(had + static_cast<std::size_t>(got));
    if (got == 0) return result;
  }
  // The limit is reached: one byte more says whether there was more.
  char probe = 0;
  for (;;) {
    const ssize_t got = ::read(fd, &probe, 1);
    if (got < 0 && errno == EINTR) continue;
    result.truncated = got > 0;
    break;
  }
  return result;
}

FileOutcome<FileBytes> readFile(const std::string& path, const ReadLimits& limits) {
  auto opened = openForReading(path, limits.links);
  if (!opened) return opened.error();
  return readOpened(std::move(opened.value()), limits.limit, limits.offset);
}

std::string DirectoryExposure::describe() const {
  char mode_text[16];
  std::snprintf(mode_text, sizeof mode_text, "%o", static_cast<unsigned>(mode & 07777));
  switch (exposure) {
    case Exposure::kOwnedByOther:
      return path + " is owned by " + userText(owner);
    case Exposure::kWorldWritable:
      return path + " is writable by every user (mode " + mode_text + ", no sticky bit)";
    case Exposure::kGroupWritable:
      return path + " is writable by " + groupText(group) + " (mode " + mode_text +
             ", no sticky bit)";
  }
  return path;
}

std::vector<DirectoryExposure> directoryExposures(const std::string& directory) {
  std::error_code error;
  const fs::path absolute = fs::absolute(directory, error).lexically_normal();
  if (error) return {};
  std::vector<std::string> paths = prefixes(absolute);
  // The same directories as the kernel reaches them, links resolved: a link's owner is looked at
  // above, the directories it leads to here.
  if (char* resolved = ::realpath(absolute.c_str(), nullptr)) {
    for (std::string& path : prefixes(fs::path(resolved))) paths.push_back(std::move(path));
    std::free(resolved);
  }
  std::vector<DirectoryExposure> out;
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    if (path.size() > 1 && path.back() == '/') continue;  // "a/" from a trailing separator
    if (!seen.insert(path).second) continue;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) continue;  // not made yet
    exposuresOf(path, info, out);
  }
  return out;
}

}  // namespace ddprun::common
