// ddprun::common's safe file primitives (ddprun/common/safe_files.h): what each does when someone
// else was there first: a link, a FIFO, a huge file, a directory of another user.
#include "ddprun/common/safe_files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "fifo_watchdog.h"
#include "temp_dir.h"

using namespace ddprun::common;
using ddprun::test::TempDir;
using ddprun::test::writeFile;

using ddprun::test::blockedOnFifo;

namespace {

// A uid and gid that are neither this user's nor root's (nobody needs to exist under them).
constexpr uid_t kOtherUid = 54321;
constexpr gid_t kOtherGid = 54321;

bool root() { return ::geteuid() == 0; }

mode_t modeOf(const std::string& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

}  // namespace

TEST_CASE("makePrivateDirectory: a fresh mode-0700 directory, whatever was planted",
          "[safe_files]") {
  TempDir dir;
  auto made = makePrivateDirectory(dir.path + "/run-XXXXXX");
  REQUIRE(made);
  CHECK(made.value().rfind(dir.path + "/run-", 0) == 0);
  CHECK(made.value().find("XXXXXX") == std::string::npos);
  CHECK(modeOf(made.value()) == 0700);
  // A fixed name (no XXXXXX) is refused by mkdtemp, not created predictably.
  auto fixed = makePrivateDirectory(dir.path + "/run");
  REQUIRE_FALSE(fixed);
  CHECK(fixed.error().problem == FileProblem::kSystem);
  CHECK(fixed.error().error == EINVAL);
}

TEST_CASE("ensureOwnDirectory: made or ours, a link, a file or another user's is refused",
          "[safe_files]") {
  TempDir dir;
  const std::string path = dir.path + "/d";
  CHECK_FALSE(ensureOwnDirectory(path).has_value());
  CHECK(modeOf(path) == 0700);
  CHECK_FALSE(ensureOwnDirectory(path).has_value());  // ours already: used as it is

  REQUIRE(::symlink(dir.path.c_str(), (dir.path + "/link").c_str()) == 0);
  auto link = ensureOwnDirectory(dir.path + "/link");
  REQUIRE(link.has_value());
  CHECK(link->problem == FileProblem::kSymlink);

  writeFile(dir.path + "/file", "x", 0600);
  auto file = ensureOwnDirectory(dir.path + "/file");
  REQUIRE(file.has_value());
  CHECK(file->problem == FileProblem::kNotRegular);
  CHECK(file->kind == FileKind::kRegular);

  auto missingParent = ensureOwnDirectory(dir.path + "/none/d");
  REQUIRE(missingParent.has_value());
  CHECK(missingParent->error == ENOENT);

  if (root()) {
    REQUIRE(::mkdir((dir.path + "/theirs").c_str(), 0777) == 0);
    REQUIRE(::chown((dir.path + "/theirs").c_str(), kOtherUid, kOtherGid) == 0);
    auto theirs = ensureOwnDirectory(dir.path + "/theirs");
    REQUIRE(theirs.has_value());
    CHECK(theirs->problem == FileProblem::kOtherOwner);
    CHECK(theirs->owner == kOtherUid);
    CHECK_THAT(theirs->describe(), Catch::Contains("54321"));
  }
}

TEST_CASE("ensureOwnDirectories: mkdir -p, each directory made or ours", "[safe_files]") {
  TempDir dir;
  CHECK_FALSE(ensureOwnDirectories(dir.path + "/a/b/c").has_value());
  CHECK(modeOf(dir.path + "/a") == 0700);
  CHECK(modeOf(dir.path + "/a/b/c") == 0700);
  CHECK_FALSE(ensureOwnDirectories(dir.path + "/a/b/c").has_value());
  REQUIRE(::symlink((dir.path + "/a").c_str(), (dir.path + "/l").c_str()) == 0);
  auto link = ensureOwnDirectories(dir.path + "/l");
  REQUIRE(link.has_value());
  CHECK(link->problem == FileProblem::kSymlink);
}

TEST_CASE("createNewFile: O_EXCL|O_NOFOLLOW, nothing planted is written through", "[safe_files]") {
  TempDir dir;
  const std::string target = dir.path + "/target";
  writeFile(target, "root only", 0600);

  auto made = createNewFile(dir.path + "/new");
  REQUIRE(made);
  CHECK((::fcntl(made->get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(modeOf(dir.path + "/new") == 0600);

  REQUIRE(::symlink(target.c_str(), (dir.path + "/link").c_str()) == 0);
  auto link = createNewFile(dir.path + "/link");
  REQUIRE_FALSE(link);
  CHECK(link.error().problem == FileProblem::kSystem);
  CHECK(link.error().error == EEXIST);

  // A dangling link: O_CREAT would make its target; O_EXCL refuses the name instead.
  REQUIRE(::symlink((dir.path + "/made-by-link").c_str(), (dir.path + "/dangling").c_str()) == 0);
  CHECK_FALSE(createNewFile(dir.path + "/dangling"));
  CHECK_FALSE(std::filesystem::exists(dir.path + "/made-by-link"));

  CHECK_FALSE(createNewFile(target));
  CHECK(ddprun::test::readFile(target) == "root only");
}

TEST_CASE("openForAppend: a new file, or our own regular file, never a link, a FIFO or a hard link",
          "[safe_files]") {
  TempDir dir;
  const std::string log = dir.path + "/stdout.log";
  {
    auto first = openForAppend(log, 0644);
    REQUIRE(first);
    CHECK_FALSE(writeAll(first->get(), "one\n").has_value());
  }
  CHECK(modeOf(log) == 0644);
  {
    auto again = openForAppend(log, 0644);
    REQUIRE(again);
    CHECK_FALSE(writeAll(again->get(), "two\n").has_value());
    CHECK((::fcntl(again->get(), F_GETFL) & O_NONBLOCK) == 0);
  }
  CHECK(ddprun::test::readFile(log) == "one\ntwo\n");

  const std::string target = dir.path + "/target";
  writeFile(target, "root only", 0600);
  REQUIRE(::symlink(target.c_str(), (dir.path + "/link.log").c_str()) == 0);
  auto link = openForAppend(dir.path + "/link.log");
  REQUIRE_FALSE(link);
  CHECK(link.error().problem == FileProblem::kSymlink);
  CHECK(ddprun::test::readFile(target) == "root only");

  REQUIRE(::link(target.c_str(), (dir.path + "/hard.log").c_str()) == 0);
  auto hard = openForAppend(dir.path + "/hard.log");
  REQUIRE_FALSE(hard);
  CHECK(hard.error().problem == FileProblem::kHardLinked);
  CHECK(ddprun::test::readFile(target) == "root only");

  const std::string fifo = dir.path + "/fifo.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(blockedOnFifo(fifo, [&] {
    auto opened = openForAppend(fifo);
    REQUIRE_FALSE(opened);
    CHECK(opened.error().problem == FileProblem::kNotRegular);
    CHECK(opened.error().kind == FileKind::kFifo);
  }));

  REQUIRE(::mkdir((dir.path + "/dir.log").c_str(), 0700) == 0);
  auto directory = openForAppend(dir.path + "/dir.log");
  REQUIRE_FALSE(directory);
  CHECK(directory.error().kind == FileKind::kDirectory);

  if (root()) {
    const std::string theirs = dir.path + "/theirs.log";
    writeFile(theirs, "theirs", 0600);
    REQUIRE(::chown(theirs.c_str(), kOtherUid, kOtherGid) == 0);
    auto opened = openForAppend(theirs);
    REQUIRE_FALSE(opened);
    CHECK(opened.error().problem == FileProblem::kOtherOwner);
  }
}

TEST_CASE("writeFileAtomically: replaces the name, never writes through a link there",
          "[safe_files]") {
  TempDir dir;
  const std::string path = dir.path + "/error.json";
  CHECK_FALSE(writeFileAtomically(path, "first", 0644).has_value());
  CHECK(ddprun::test::readFile(path) == "first");
  CHECK(modeOf(path) == 0644);
  CHECK_FALSE(writeFileAtomically(path, "second").has_value());
  CHECK(ddprun::test::readFile(path) == "second");
  CHECK(modeOf(path) == 0600);

  const std::string target = dir.path + "/target";
  writeFile(target, "root only", 0600);
  const std::string linked = dir.path + "/linked.json";
  REQUIRE(::symlink(target.c_str(), linked.c_str()) == 0);
  CHECK_FALSE(writeFileAtomically(linked, "new").has_value());
  CHECK(ddprun::test::readFile(target) == "root only");
  CHECK(modeOf(linked) == 0600);  // a file now, not the link
  CHECK(ddprun::test::readFile(linked) == "new");

  // Nothing else is left in the directory (the temporary files were renamed).
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path))
    ++entries;
  CHECK(entries == 3);

  auto noDirectory = writeFileAtomically(dir.path + "/none/x.json", "x");
  REQUIRE(noDirectory.has_value());
  CHECK(noDirectory->error == ENOENT);
}

TEST_CASE("readFile: a regular file up to a limit, saying when it held more", "[safe_files]") {
  TempDir dir;
  const std::string path = dir.path + "/f";
  writeFile(path, "0123456789", 0600);
  auto whole = readFile(path, {100});
  REQUIRE(whole);
  CHECK(whole->bytes == "0123456789");
  CHECK_FALSE(whole->truncated);
  CHECK(whole->info.st_size == 10);

  auto exact = readFile(path, {10});
  REQUIRE(exact);
  CHECK(exact->bytes == "0123456789");
  CHECK_FALSE(exact->truncated);

  auto cut = readFile(path, {4});
  REQUIRE(cut);
  CHECK(cut->bytes == "0123");
  CHECK(cut->truncated);

  auto from = readFile(path, {4, 3});
  REQUIRE(from);
  CHECK(from->bytes == "3456");
  CHECK(from->truncated);

  auto missing = readFile(dir.path + "/none", {10});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().problem == FileProblem::kSystem);
  CHECK(missing.error().error == ENOENT);
}

TEST_CASE("readFile: a link is refused unless followed on purpose", "[safe_files]") {
  TempDir dir;
  writeFile(dir.path + "/target", "secret", 0600);
  REQUIRE(::symlink((dir.path + "/target").c_str(), (dir.path + "/link").c_str()) == 0);
  auto refused = readFile(dir.path + "/link", {100});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().problem == FileProblem::kSymlink);
  CHECK_THAT(refused.error().describe(), Catch::Contains("symbolic link"));
  auto followed = readFile(dir.path + "/link", {100, 0, Links::kFollow});
  REQUIRE(followed);
  CHECK(followed->bytes == "secret");
  // O_NOFOLLOW concerns the last component only: a link on the way is followed.
  REQUIRE(::symlink(dir.path.c_str(), (dir.path + "/up").c_str()) == 0);
  auto through = readFile(dir.path + "/up/target", {100});
  REQUIRE(through);
  CHECK(through->bytes == "secret");
}

TEST_CASE("readFile: a FIFO, a directory or a device is refused, without blocking",
          "[safe_files]") {
  TempDir dir;
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(blockedOnFifo(fifo, [&] {
    auto read = readFile(fifo, {100, 0, Links::kFollow});
    REQUIRE_FALSE(read);
    CHECK(read.error().problem == FileProblem::kNotRegular);
    CHECK(read.error().kind == FileKind::kFifo);
    CHECK(read.error().describe() == "is a FIFO, not a regular file");
  }));
  // Behind a followed link, too.
  REQUIRE(::symlink(fifo.c_str(), (dir.path + "/to-fifo").c_str()) == 0);
  CHECK_FALSE(blockedOnFifo(fifo, [&] {
    auto read = readFile(dir.path + "/to-fifo", {100, 0, Links::kFollow});
    REQUIRE_FALSE(read);
    CHECK(read.error().kind == FileKind::kFifo);
  }));

  auto directory = readFile(dir.path, {100});
  REQUIRE_FALSE(directory);
  CHECK(directory.error().kind == FileKind::kDirectory);

  auto device = readFile("/dev/zero", {100});
  REQUIRE_FALSE(device);
  CHECK(device.error().kind == FileKind::kCharDevice);
}

TEST_CASE("readFile: /proc files, which report size 0, are read to their end", "[safe_files]") {
  auto status = readFile("/proc/self/status", {1 << 20});
  REQUIRE(status);
  CHECK(status->info.st_size == 0);
  CHECK(status->bytes.find("Pid:") != std::string::npos);
  CHECK_FALSE(status->truncated);
  auto cut = readFile("/proc/self/status", {5});
  REQUIRE(cut);
  CHECK(cut->bytes == "Name:");
  CHECK(cut->truncated);
}

TEST_CASE("readFile: a 1 GiB sparse file is not read past the limit", "[safe_files]") {
  TempDir dir;
  const std::string path = dir.path + "/huge";
  {
    auto made = createNewFile(path);
    REQUIRE(made);
    REQUIRE(::ftruncate(made->get(), off_t{1} << 30) == 0);
  }
  auto read = readFile(path, {1 << 20});
  REQUIRE(read);
  CHECK(read->bytes.size() == std::size_t{1} << 20);
  CHECK(read->bytes.capacity() < (std::size_t{4} << 20));
  CHECK(read->truncated);
  CHECK(read->info.st_size == off_t{1} << 30);
}

TEST_CASE("directoryExposures: who else can write a directory or one above it", "[safe_files]") {
  TempDir dir;  // under /tmp: root's, sticky
  CHECK(directoryExposures(dir.path).empty());
  const std::string inner = dir.path + "/inner";
  REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
  CHECK(directoryExposures(inner).empty());
  CHECK(directoryExposures(dir.path + "/not-yet/made").empty());

  SECTION("world-writable without the sticky bit, here or above") {
    REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
    auto found = directoryExposures(inner);
    REQUIRE(found.size() == 1);
    CHECK(found[0].path == dir.path);
    CHECK(found[0].exposure == Exposure::kWorldWritable);
    CHECK_THAT(found[0].describe(),
               Catch::Contains("writable by every user") && Catch::Contains("777"));
    REQUIRE(::chmod(dir.path.c_str(), 01777) == 0);  // sticky, as /tmp: fine
    CHECK(directoryExposures(inner).empty());
    REQUIRE(::chmod(dir.path.c_str(), 0700) == 0);
  }
  if (!root()) return;
  SECTION("owned by another user, here or above, a link's owner included") {
    REQUIRE(::chown(inner.c_str(), kOtherUid, kOtherGid) == 0);
    auto found = directoryExposures(inner);
    REQUIRE(found.size() == 1);
    CHECK(found[0].exposure == Exposure::kOwnedByOther);
    CHECK(found[0].owner == kOtherUid);
    CHECK_THAT(found[0].describe(), Catch::Contains("owned by uid 54321"));
    REQUIRE(::mkdir((inner + "/below").c_str(), 0700) == 0);
    auto above = directoryExposures(inner + "/below");
    REQUIRE(above.size() == 1);
    CHECK(above[0].path == inner);

    const std::string mine = dir.path + "/mine";
    REQUIRE(::mkdir(mine.c_str(), 0700) == 0);
    const std::string link = dir.path + "/their-link";
    REQUIRE(::symlink(mine.c_str(), link.c_str()) == 0);
    REQUIRE(::lchown(link.c_str(), kOtherUid, kOtherGid) == 0);
    auto throughLink = directoryExposures(link);
    REQUIRE(throughLink.size() == 1);
    CHECK(throughLink[0].path == link);
    CHECK(throughLink[0].exposure == Exposure::kOwnedByOther);
  }
  SECTION("group-writable by another group without the sticky bit") {
    REQUIRE(::chown(inner.c_str(), 0, kOtherGid) == 0);
    REQUIRE(::chmod(inner.c_str(), 0770) == 0);
    auto found = directoryExposures(inner);
    REQUIRE(found.size() == 1);
    CHECK(found[0].exposure == Exposure::kGroupWritable);
    CHECK_THAT(found[0].describe(), Catch::Contains("group 54321"));
    REQUIRE(::chmod(inner.c_str(), 01770) == 0);
    CHECK(directoryExposures(inner).empty());
  }
}

TEST_CASE("FileError: a code for std::system_error, a line for people", "[safe_files]") {
  FileError missing{FileProblem::kSystem, ENOENT};
  CHECK(missing.code() == std::errc::no_such_file_or_directory);
  CHECK(missing.describe() == std::strerror(ENOENT));
  FileError fifo{FileProblem::kNotRegular, 0, FileKind::kFifo};
  CHECK(fifo.code().category() == fileProblemCategory());
  CHECK(std::system_error(fifo.code(), "cannot open x").what() ==
        std::string("cannot open x: is not a regular file"));
  CHECK(userText(0) == "uid 0 (root)");
  CHECK(userName(kOtherUid) == "54321");
}

TEST_CASE("writeAll: a non-blocking descriptor is waited for, up to a stall limit",
          "[safe_files]") {
  int ends[2];
  REQUIRE(::pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0);
  const std::string bytes(256 * 1024, 'x');  // more than a pipe holds
  // A reader that drains the pipe: everything arrives although the pipe fills many times.
  std::thread reader([&] {
    std::size_t total = 0;
    char buffer[65536];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (total < bytes.size() && std::chrono::steady_clock::now() < deadline) {
      pollfd readable{ends[0], POLLIN, 0};
      ::poll(&readable, 1, 100);
      const ssize_t n = ::read(ends[0], buffer, sizeof buffer);
      if (n > 0) total += static_cast<std::size_t>(n);
    }
  });
  CHECK_FALSE(writeAll(ends[1], bytes).has_value());
  reader.join();

  // Nobody reads: the writer gives up after the stall limit with EAGAIN, not at once, not never.
  const auto started = std::chrono::steady_clock::now();
  const auto stalled = writeAll(ends[1], bytes, std::chrono::milliseconds(50));
  const auto waited = std::chrono::steady_clock::now() - started;
  REQUIRE(stalled.has_value());
  CHECK(stalled->error == EAGAIN);
  CHECK(waited >= std::chrono::milliseconds(50));
  CHECK(waited < std::chrono::seconds(10));
  ::close(ends[0]);
  ::close(ends[1]);
}
