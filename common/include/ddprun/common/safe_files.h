// Opening files where someone else may have been first (docs/security.md, "On the node"): another
// user of the machine (a shared /tmp, a --log-dir others can write into) or a worker (its error
// file, its stack dump). One copy of each rule, for the agent and the rendezvous daemon:
//
//   makePrivateDirectory  mkdtemp: a new directory, mode 0700, under a name no one can guess
//   ensureOwnDirectory(ies)  a directory of ours at a fixed name: made, or one of ours already
//                         there; a link or another user's directory is refused, never adopted
//   createNewFile         O_CREAT|O_EXCL|O_NOFOLLOW: a new file, never whatever was planted there
//   openForAppend         a new file as above, or an existing regular file of ours with a single
//                         link, opened without following a link and without blocking
//   writeFileAtomically   a new file under a random name beside `path`, renamed onto it
//   openForReading,       O_NONBLOCK (a FIFO cannot block) and O_NOFOLLOW (unless told), then
//   readOpened, readFile  fstat: a regular file only, read up to a stated limit, saying whether
//                         the file held more
//   directoryExposures    who else can write into a directory or one above it (as ssh's
//                         StrictModes asks of ~/.ssh)
//
// Failures are values (FileError: a FileProblem, errno, what was found), never exceptions: the
// callers decide what each problem means to them, by its code. O_NOFOLLOW concerns the last
// component only: "/proc/self/stat" is read through the "self" link as before.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace ddprun::common {

// An owned file descriptor, closed when it goes.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// "uid 999 (alice)", or "uid 999" for a uid without a name: a user named in a message.
std::string userText(uid_t uid);
// "alice", or "999": a user as chown(1) takes it.
std::string userName(uid_t uid);

// What a name turned out to be (for a file that is not the regular file asked for).
enum class FileKind {
  kRegular,
  kDirectory,
  kSymlink,
  kFifo,
  kSocket,
  kCharDevice,
  kBlockDevice,
  kOther
};
FileKind fileKind(mode_t mode);
// "a FIFO", "a directory", "a symbolic link", ...
const char* fileKindName(FileKind kind);

enum class FileProblem {
  kSystem,      // a system call failed: `error` is its errno (ENOENT, EACCES, EEXIST: the name is
                // taken)
  kSymlink,     // the last component is a symbolic link, which was not followed
  kNotRegular,  // a FIFO, device, socket or directory where a regular file was wanted (`kind`)
  kOtherOwner,  // an existing file or directory that belongs to another user (`owner`)
  kHardLinked,  // an existing regular file with more than one name: a hard link someone planted
};

struct FileError {
  FileProblem problem = FileProblem::kSystem;
  int error = 0;                     // errno, for kSystem
  FileKind kind = FileKind::kOther;  // for kNotRegular
  uid_t owner = 0;                   // for kOtherOwner

  // What was wrong, without the path: "No such file or directory", "is a FIFO, not a regular
  // file", "is a symbolic link (not followed)", "belongs to uid 999 (ddprun-attacker)".
  std::string describe() const;
  // For std::system_error: errno's code for kSystem, else the problem in fileProblemCategory().
  std::error_code code() const;
};

// The category of FileError::code() for problems that are not an errno.
const std::error_category& fileProblemCategory();

// A value or the FileError that stopped it.
template <typename T>
class FileOutcome {
 public:
  FileOutcome(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as std::expected
  FileOutcome(FileError error) : error_(error) {}     // NOLINT
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  // REQUIRES: !ok().
  const FileError& error() const { return *error_; }

 private:
  std::optional<T> value_;
  std::optional<FileError> error_;
};

// --- directories ---

// mkdtemp(3) of `pattern` (ending in "XXXXXX"): a new directory of mode 0700 under a random name;
// mkdtemp picks another name when one is taken, so names planted in advance change nothing.
FileOutcome<std::string> makePrivateDirectory(std::string pattern);

// `path` as a directory of this user: made with `mode` when absent; when something is there
// already it must be a real directory (not a link) owned by this user, which is then used as it
// is. Another user's directory is never adopted (kOtherOwner), a link never followed (kSymlink).
// The parent must exist. Nothing on success.
std::optional<FileError> ensureOwnDirectory(const std::string& path, mode_t mode = 0700);

// ensureOwnDirectory for `path` and each missing directory above it (as mkdir -p): the first
// directory that exists above the missing ones is taken as it is (the caller's), every one below
// it is made, and `path`, when it was there already, must be this user's own real directory.
std::optional<FileError> ensureOwnDirectories(const std::string& path, mode_t mode = 0700);

// --- writing ---

// A new file: open(O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode). Whatever is at the name
// already (a file, a link, a FIFO) is EEXIST: never written through.
FileOutcome<FileDescriptor> createNewFile(const std::string& path, mode_t mode = 0600);

// A file to append to: a new one as createNewFile; an existing one only if it is a regular file
// of this user with one link, opened without following a link (kSymlink) and without blocking
// (a FIFO is kNotRegular, not a wait for a reader).
FileOutcome<FileDescriptor> openForAppend(const std::string& path, mode_t mode = 0600);

// Writes all of `bytes` to `fd` (partial writes and EINTR retried). A descriptor that is
// non-blocking (one shared with a parent that made it so) is waited for with poll(), for at most
// `stallLimit` without progress when one is given. Nothing, or errno's FileError (EAGAIN when the
// stall limit passed).
std::optional<FileError> writeAll(int fd, std::string_view bytes,
                                  std::optional<std::chrono::milliseconds> stallLimit = {});

// Replaces `path` with a file holding `content` (mode `mode`): written to a new file under an
// unguessable name in the same directory (mkostemp: never one planted there), then renamed onto
// `path`, so a reader sees the old file or the new one, and a link at `path` is replaced, not
// followed. Nothing on success; the temporary file is removed on failure.
std::optional<FileError> writeFileAtomically(const std::string& path, std::string_view content,
                                             mode_t mode = 0600);

// --- reading ---

enum class Links {
  kRefuse,  // O_NOFOLLOW: a link at the name is kSymlink (files a worker or another user controls)
  kFollow,  // a path the user gave, where a link is normal (a secret mounted by Kubernetes)
};

struct OpenedFile {
  FileDescriptor fd;
  struct stat info {};  // fstat of what was opened: its owner, mode, size
};

// open(O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC, plus O_NOFOLLOW for Links::kRefuse), then fstat:
// a regular file, or kNotRegular naming what it is (a FIFO is opened without waiting for a
// writer, and refused). The descriptor is blocking again on return.
FileOutcome<OpenedFile> openForReading(const std::string& path, Links links);

struct FileBytes {
  std::string bytes;       // at most `limit` bytes from `offset`
  bool truncated = false;  // the file held more than that
  struct stat info {};     // fstat of the file read
};

// Reads at most `limit` bytes of an opened file from `offset`, by read(2) to the end, so files
// that report no size (/proc, /sys) are read whole; `truncated` says whether more was there.
FileOutcome<FileBytes> readOpened(OpenedFile file, std::size_t limit, std::size_t offset = 0);

struct ReadLimits {
  std::size_t limit;             // the most bytes kept; a longer file is `truncated`
  std::size_t offset = 0;        // where to start
  Links links = Links::kRefuse;  // whether a link at the name is followed
};

// openForReading + readOpened.
FileOutcome<FileBytes> readFile(const std::string& path, const ReadLimits& limits);

// --- who else can write ---

enum class Exposure {
  kOwnedByOther,   // owned by a user who is neither this one nor root: they may do anything there
  kWorldWritable,  // every user may add, rename and remove names in it (no sticky bit)
  kGroupWritable,  // the members of its group may (no sticky bit), and the group is not just ours
};

struct DirectoryExposure {
  std::string path;  // the directory concerned (the one asked about, one above it, or a link)
  Exposure exposure = Exposure::kOwnedByOther;
  uid_t owner = 0;
  gid_t group = 0;
  mode_t mode = 0;

  // "/data is owned by uid 1000 (alice)", "/scratch is writable by every user (mode 777, no
  // sticky bit)", "/proj is writable by group 100 (users) (mode 775, no sticky bit)".
  std::string describe() const;
};

// Who else can change what `directory` holds: the directory and every one above it (as given,
// a link's owner included, and as resolved by realpath) must belong to this user or root and be
// writable by no one else, unless sticky (as /tmp: names in it can be removed or renamed only by
// their owners, so mkdtemp in it is safe). Group-writable is not counted for a group that only
// this user is in (a user private group). Empty: no one else. Components that do not exist are
// not looked at.
std::vector<DirectoryExposure> directoryExposures(const std::string& directory);

}  // namespace ddprun::common
