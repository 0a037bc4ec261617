// console_writer: how pieces of several sources are framed on one console (ConsoleLines, pure),
// and the ConsoleWriter doing it on a real pipe.
#include "output/console_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "output/console_lines.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;

namespace {

// Frames pieces in order, as the writer does.
class Framer {
 public:
  Framer& piece(std::uint64_t source, const std::string& prefix, const std::string& text) {
    lines_.frame(source, prefix, text, out_);
    return *this;
  }
  Framer& agent(const std::string& text) {
    lines_.frameUnsourced(text, out_);
    return *this;
  }
  const std::string& out() const { return out_; }
  std::uint64_t open() const { return lines_.openSource(); }

 private:
  ConsoleLines lines_;
  std::string out_;
};

// Everything a pipe's reading end `fd` gives until every writer has closed it; closes `fd`.
std::string readToEnd(int fd) {
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

TEST_CASE("ConsoleLines: every line of a source starts with its prefix", "[console_writer]") {
  Framer framer;
  framer.piece(1, "[p]:", "a\n\nb\n");
  CHECK(framer.out() == "[p]:a\n[p]:\n[p]:b\n");
  CHECK(framer.open() == 0);
}

TEST_CASE("ConsoleLines: an open line continues without a prefix until another source comes",
          "[console_writer]") {
  Framer framer;
  framer.piece(1, "[a]:", "ab").piece(1, "[a]:", "c\n");
  CHECK(framer.out() == "[a]:abc\n");
  Framer other;
  other.piece(1, "[a]:", "ab");
  CHECK(other.open() == 1);
  other.piece(2, "[b]:", "xy\n").piece(1, "[a]:", "c\n");
  CHECK(other.out() == "[a]:ab\n[b]:xy\n[a]:c\n");
  // An empty prefix: the lines are still kept apart.
  Framer bare;
  bare.piece(1, "", "ab").piece(2, "", "xy").piece(1, "", "c\n");
  CHECK(bare.out() == "ab\nxy\nc\n");
}

TEST_CASE("ConsoleLines: redraws after a carriage return keep the prefix", "[console_writer]") {
  SECTION("in one piece") {
    Framer framer;
    framer.piece(1, "[p]:", "\r 10%\r 20%\n");
    CHECK(framer.out() == "\r[p]: 10%\r[p]: 20%\n");
  }
  SECTION("a carriage return ending a piece: the prefix comes with the next one") {
    Framer framer;
    framer.piece(1, "[p]:", " 10%\r").piece(1, "[p]:", " 20%");
    CHECK(framer.out() == "[p]: 10%\r[p]: 20%");
    CHECK(framer.open() == 1);
  }
  SECTION("CRLF lines get no stray prefix") {
    Framer framer;
    framer.piece(1, "[p]:", "a\r\nb\r").piece(1, "[p]:", "\n");
    CHECK(framer.out() == "[p]:a\r\n[p]:b\r\n");
    CHECK(framer.open() == 0);
  }
  SECTION("a bar ended by another source is redrawn on a line of its own") {
    Framer framer;
    framer.piece(1, "[p]:", "\r 10%").piece(2, "[q]:", "x\n").piece(1, "[p]:", "\r 20%");
    CHECK(framer.out() == "\r[p]: 10%\n[q]:x\n\r[p]: 20%");
  }
}

TEST_CASE("ConsoleLines: the agent's lines end an open line and are left as they are",
          "[console_writer]") {
  Framer framer;
  framer.agent("agent 1\n").piece(1, "[p]:", "50%").agent("agent 2\n").piece(1, "[p]:", "\r60%\n");
  CHECK(framer.out() == "agent 1\n[p]:50%\nagent 2\n\r[p]:60%\n");
}

TEST_CASE("ConsoleWriter: framed pieces and the agent's lines on a real pipe", "[console_writer]") {
  int ends[2];
  REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
  boost::asio::io_context io;
  {
    ConsoleWriter writer(ends[1], io);
    const std::uint64_t rank0 = ConsoleLines::newSource();
    const std::uint64_t rank1 = ConsoleLines::newSource();
    CHECK(rank0 != rank1);
    writer.write(rank0, "[0]:", "\r 5%");
    writer.write(rank1, "[1]:", "hello\n");
    writer.write(rank0, "[0]:", "\r10%");
    writer.write(std::string("agent line\n"));
    writer.write(rank0, "[0]:", "\r15%\n");
    CHECK(writer.flush(10s));
  }
  ::close(ends[1]);
  const std::string text = readToEnd(ends[0]);
  CHECK(text == "\r[0]: 5%\n[1]:hello\n\r[0]:10%\nagent line\n\r[0]:15%\n");
}

namespace {

// The threads of this process now (/proc/self/task).
std::size_t threadCount() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++count;
  return count;
}

// Waits (bounded) until this process has `count` threads or fewer; the count seen last.
std::size_t settlesAt(std::size_t count) {
  std::size_t seen = threadCount();
  for (int i = 0; i < 500 && seen > count; ++i) {
    std::this_thread::sleep_for(10ms);
    seen = threadCount();
  }
  return seen;
}

}  // namespace

TEST_CASE(
    "ConsoleWriter: no thread until there is something to write, then one, gone with the writer",
    "[console_writer]") {
  // A quiet job (nothing printed) starts no writing thread and has none to end when it leaves.
  REQUIRE(settlesAt(1) == 1);  // the earlier tests' writers have ended theirs
  int ends[2];
  REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
  boost::asio::io_context io;
  {
    ConsoleWriter quiet(ends[1], io);
    CHECK(threadCount() == 1);
    CHECK(quiet.flush(1s));  // nothing queued: at once
  }
  {
    ConsoleWriter writer(ends[1], io);
    writer.write(std::string("first\n"));
    CHECK(threadCount() == 2);
    writer.write(std::string("second\n"));
    CHECK(threadCount() == 2);  // one thread, however many writes
    CHECK(writer.flush(10s));
  }
  CHECK(settlesAt(1) == 1);
  ::close(ends[1]);
  // Every descriptor of the pipe's writing end is closed (the quiet writer's copy too): the
  // reader sees the end after what was written.
  const std::string text = readToEnd(ends[0]);
  CHECK(text == "first\nsecond\n");
}

TEST_CASE("samePlace: one pipe through two descriptors, or two pipes", "[console_writer]") {
  int one[2];
  int two[2];
  REQUIRE(::pipe2(one, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(two, O_CLOEXEC) == 0);
  const int copy = ::fcntl(one[1], F_DUPFD_CLOEXEC, 3);
  CHECK(samePlace(one[1], copy));
  CHECK(samePlace(one[1], one[0]));  // both ends: one pipe
  CHECK_FALSE(samePlace(one[1], two[1]));
  CHECK_FALSE(samePlace(one[1], -1));
  for (int fd : {one[0], one[1], two[0], two[1], copy}) ::close(fd);
}
