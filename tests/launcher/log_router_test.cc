// log_router: real /bin/sh workers, the LogRouter on a real io_context, and console "terminals"
// that are pipes read by threads of the test.
#include "output/log_router.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "core/line_scan.h"
#include "temp_dir.h"

using namespace ddprun::launcher;
using ddprun::test::readFile;
using ddprun::test::TempDir;
using ddprun::test::writeFile;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The agent's console: a pipe whose reading side a thread empties into a string.
class Console {
 public:
  explicit Console(bool nonBlocking = false) {
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    read_ = ends[0];
    write_ = ends[1];
    if (nonBlocking) REQUIRE(::fcntl(write_, F_SETFL, O_NONBLOCK) == 0);
    reader_ = std::thread([this] {
      char buffer[4096];
      for (;;) {
        const ssize_t n = ::read(read_, buffer, sizeof buffer);
        if (n > 0) {
          {
            std::lock_guard lock(mutex_);
            text_.append(buffer, static_cast<std::size_t>(n));
          }
          // A slow terminal, now and then, so the agent's writes meet a full pipe.
          if (++reads_ % 64 == 0) std::this_thread::sleep_for(1ms);
        } else if (n == 0 || errno != EINTR) {
          break;
        }
      }
    });
  }
  ~Console() { text(); }
  int fd() const { return write_; }
  // What has arrived so far (the writing side stays open).
  std::string snapshot() {
    std::lock_guard lock(mutex_);
    return text_;
  }
  // Everything written, once the writing side is closed.
  const std::string& text() {
    if (write_ >= 0) {
      ::close(write_);
      write_ = -1;
      reader_.join();
      ::close(read_);
    }
    return text_;
  }

 private:
  int read_ = -1;
  int write_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::string text_;
  int reads_ = 0;
};

// Where the harness's agent writes: a console for stdout and one for stderr, or one console
// for both (as on one terminal, or under 2>&1).
enum class Consoles { kTwo, kOne };

// A LogRouter, its io_context, two consoles and the workers started through them.
class Harness {
 public:
  explicit Harness(LogRouterOptions options, bool nonBlockingConsole = false,
                   Consoles consoles = Consoles::kTwo)
      : out_(nonBlockingConsole), err_(nonBlockingConsole) {
    options.consoleOut = out_.fd();
    options.consoleErr = consoles == Consoles::kOne ? out_.fd() : err_.fd();
    router_ = std::make_unique<LogRouter>(io_, options);
  }
  ~Harness() {
    for (pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  LogRouter& router() { return *router_; }
  boost::asio::io_context& io() { return io_; }

  // Starts `/bin/sh -c script` as worker `localRank`, as the agent would.
  pid_t spawn(int localRank, const std::string& script, const std::string& attemptDir = "",
              int rank = -1, int groupRank = 0) {
    const ChildStreams streams = router_->prepare(localRank, rank < 0 ? localRank : rank, groupRank,
                                                  /*attempt=*/0, attemptDir, !attemptDir.empty());
    REQUIRE(streams.out >= 0);
    REQUIRE(streams.err >= 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(streams.out, 1);
      ::dup2(streams.err, 2);
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids_.push_back(pid);
    router_->started(localRank);
    return pid;
  }

  // Runs the loop until drain() completes; returns how long that took.
  std::chrono::milliseconds drain(std::chrono::milliseconds grace) {
    bool drained = false;
    boost::asio::steady_timer watchdog(io_, 60s);
    watchdog.async_wait([this](const boost::system::error_code& error) {
      if (!error) io_.stop();
    });
    const auto start = std::chrono::steady_clock::now();
    router_->drain(grace, [&] {
      drained = true;
      watchdog.cancel();
    });
    io_.restart();
    io_.run();
    REQUIRE(drained);
    const auto took = std::chrono::steady_clock::now() - start;
    // A worker without pipes (writing to its files itself) is only done when it has exited.
    reapAll();
    return std::chrono::duration_cast<std::chrono::milliseconds>(took);
  }

  // Runs the loop until the stdout console has received `wanted` (true), or 10 s went by (false:
  // the caller's REQUIRE shows what did arrive).
  bool runUntilOut(const std::string& wanted) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (out_.snapshot().find(wanted) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(10ms);
    }
    return true;
  }
  std::string outSoFar() { return out_.snapshot(); }

  void reapAll() {
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
    pids_.clear();
  }

  // Closes the router and the consoles; returns what each console received.
  std::pair<std::string, std::string> finish() {
    router_->closeAll();
    io_.restart();
    io_.poll();
    router_.reset();
    return {out_.text(), err_.text()};
  }

 private:
  boost::asio::io_context io_;
  Console out_;
  Console err_;
  std::unique_ptr<LogRouter> router_;
  std::vector<pid_t> pids_;
};

StreamSelection every(bool out, bool err) {
  StreamSelection selection;
  selection.all = StdStreams{out, err};
  return selection;
}

bool fdIsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// "[defaultW]:wW <kind> N<tail>" -> (W, N, tail); nothing when the line is not of that shape
// (a torn line, a wrong prefix, or a prefix naming another worker than the text).
std::optional<std::tuple<int, int, std::string>> parseLine(const std::string& line,
                                                           const std::string& kind) {
  for (int worker : {0, 1}) {
    const std::string head =
        "[default" + std::to_string(worker) + "]:w" + std::to_string(worker) + " " + kind + " ";
    if (line.compare(0, head.size(), head) != 0) continue;
    std::size_t end = head.size();
    while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end])) != 0) ++end;
    if (end == head.size()) return std::nullopt;
    return std::make_tuple(worker, std::stoi(line.substr(head.size(), end - head.size())),
                           line.substr(end));
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("prefixes: torchrun's default and the template with its macros", "[log_router]") {
  LogRouterOptions options;
  CHECK(linePrefix(options, 3, 11, 1, 0).text() == "[default3]:");
  options.role = "trainer";
  options.hostname = "nodeA";
  options.prefixTemplate = "${hostname}:${role_name}-${rank}/${local_rank}@${group_rank}|";
  CHECK(linePrefix(options, 1, 5, 2, 0).text() == "nodeA:trainer-5/1@2|");
  // Python's Template.safe_substitute: $name, $$, unknown names and stray '$' left alone.
  options.prefixTemplate = "$rank$$ ${nope} $nope $ ${rank";
  CHECK(linePrefix(options, 1, 5, 2, 0).text() == "5$ ${nope} $nope $ ${rank");
  CHECK_FALSE(linePrefix(options, 1, 5, 2, 0).timed());
  CHECK(rankDirectory("/logs/run/attempt_0", 3) == "/logs/run/attempt_0/3");
}

TEST_CASE("prefixes: the time and the elapsed seconds are filled in per batch", "[log_router]") {
  LogRouterOptions options;
  options.prefixTemplate = "${time} +${attempt} ${elapsed} [${role_name}${local_rank}]:";
  const LinePrefix prefix = linePrefix(options, 2, 2, 0, 7);
  CHECK(prefix.timed());
  // A wall clock of the test's choosing: 12:34:56.789 local time today.
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  local.tm_hour = 12;
  local.tm_min = 34;
  local.tm_sec = 56;
  const auto wall = std::chrono::system_clock::from_time_t(std::mktime(&local)) + 789ms;
  CHECK(prefix.at(wall, 123456ms) == "12:34:56.789 +7 +123.456s [default2]:");
  CHECK(prefix.at(wall + 1211ms, 0ms) == "12:34:58.000 +7 +0.000s [default2]:");
  CHECK(clockText(wall + 3s) == "12:34:59.789");
  CHECK(elapsedText(std::chrono::nanoseconds(1500000)) == "+0.002s");
  // "$$" stays a literal "$": "$${time}" is the text "${time}", never a time.
  options.prefixTemplate = "$${time}|$time|";
  const LinePrefix literal = linePrefix(options, 0, 0, 0, 0);
  CHECK(literal.at(wall, 0ms) == "${time}|12:34:56.789|");
}

TEST_CASE("line patterns: lines matched per batch, the events told once each", "[log_router]") {
  // The router's scan: each line of a read, then what the read said.
  struct Events final : LineEvents {
    std::vector<std::string> told;
    void progressLine(int localRank) override {
      told.push_back("progress " + std::to_string(localRank));
    }
    void startLine(int localRank) override { told.push_back("start " + std::to_string(localRank)); }
    void failLine(int localRank, std::string_view line) override {
      told.push_back("fail " + std::to_string(localRank) + " " + std::string(line));
    }
  };
  HangPolicy policy;
  policy.progressPattern = "step [0-9]+";
  policy.startPattern = "^training started";
  policy.failPattern = "loss (nan|inf)";
  const LinePatterns patterns = LinePatterns::of(policy);
  LineScan scan(patterns, 3);
  Events events;
  scan.line("loading");
  scan.endBatch(events);
  CHECK(events.told.empty());
  // Two progress lines in one read: one report. "training started" not at the start: no start.
  scan.line("step 1 loss 2.0");
  scan.line("step 2 loss 1.9 training started");
  scan.endBatch(events);
  CHECK(events.told == std::vector<std::string>{"progress 3"});
  events.told.clear();
  scan.line("training started");
  scan.line("step 3 loss nan");
  scan.line("step 4 loss inf");  // a second failing line: the first one is told, once
  scan.endBatch(events);
  CHECK(events.told == std::vector<std::string>{"progress 3", "start 3", "fail 3 step 3 loss nan"});
  events.told.clear();
  // Start and failure are told once per stream; progress per batch.
  scan.line("training started");
  scan.line("step 5 loss nan");
  scan.endBatch(events);
  CHECK(events.told == std::vector<std::string>{"progress 3"});
  // A failing line is kept bounded; a line with a NUL byte is matched as bytes.
  LineScan other(patterns, 0);
  events.told.clear();
  other.line(std::string("x\0y loss nan ", 13) + std::string(5000, 'z'));
  other.endBatch(events);
  REQUIRE(events.told.size() == 1);
  CHECK(events.told[0].size() == std::string("fail 0 ").size() + LineScan::kKeptFailLine);
  // No pattern given: none compiled, nothing matched.
  CHECK_FALSE(LinePatterns::of(HangPolicy{}).any());
  // The command line refuses a bad pattern; one that reaches the agent anyway is named.
  HangPolicy bad;
  bad.failPattern = "loss (nan";
  CHECK_THROWS_WITH(LinePatterns::of(bad), Catch::Contains("--fail-pattern"));
}

TEST_CASE("line patterns: every stream is read, even one bound for a file only or for nowhere",
          "[log_router]") {
  struct Events final : LineEvents {
    std::map<int, int> progress;
    std::map<int, std::string> failed;
    void progressLine(int localRank) override { ++progress[localRank]; }
    void startLine(int) override {}
    void failLine(int localRank, std::string_view line) override {
      failed[localRank] = std::string(line);
    }
  };
  TempDir dir;
  Events events;
  HangPolicy policy;
  policy.progressPattern = "^step";
  policy.failPattern = "loss nan";
  LogRouterOptions options;
  options.patterns = std::make_shared<const LinePatterns>(LinePatterns::of(policy));
  options.lineEvents = &events;
  options.passThrough = true;  // never with patterns: the lines must pass through the router
  options.localRanksFilter = std::set<int>{0};  // rank 1 reaches no console
  Harness harness(options);
  harness.spawn(0, "echo step 1; echo 'step 2 loss nan' >&2");
  harness.spawn(1, "echo step 1; echo hidden");
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:step 1\n");
  CHECK(err == "[default0]:step 2 loss nan\n");
  CHECK(events.progress[0] >= 1);
  CHECK(events.progress[1] >= 1);
  CHECK(events.failed[0] == "step 2 loss nan");
  CHECK(events.failed.count(1) == 0);
}

TEST_CASE("worker lines reach the matching console, prefixed", "[log_router]") {
  SECTION("default prefix") {
    Harness harness(LogRouterOptions{});
    harness.spawn(0, "echo hello; echo oops >&2; echo bye");
    harness.drain(10s);
    const auto [out, err] = harness.finish();
    CHECK(out == "[default0]:hello\n[default0]:bye\n");
    CHECK(err == "[default0]:oops\n");
  }
  SECTION("template") {
    LogRouterOptions options;
    options.role = "trainer";
    options.hostname = "nodeA";
    options.prefixTemplate = "${hostname}/${rank}/${local_rank}> ";
    Harness harness(options);
    harness.spawn(1, "echo hello", "", 7);
    harness.drain(10s);
    CHECK(harness.finish().first == "nodeA/7/1> hello\n");
  }
}

TEST_CASE("two chatty workers: every console line is whole, prefixed and in order",
          "[log_router]") {
  const bool nonBlocking = GENERATE(false, true);
  CAPTURE(nonBlocking);
  Harness harness(LogRouterOptions{}, nonBlocking);
  // 2000 lines each, every 50th one 20000 bytes long (more than a pipe's atomic write), on both
  // streams, from both workers at once.
  const std::string body =
      "long=$(head -c 20000 /dev/zero | tr '\\0' x); i=0; while [ $i -lt 2000 ]; do "
      "if [ $((i % 50)) -eq 0 ]; then echo \"$W line $i $long\"; else echo \"$W line $i\"; fi; "
      "if [ $((i % 10)) -eq 0 ]; then echo \"$W err $i\" >&2; fi; i=$((i+1)); done";
  harness.spawn(0, "W=w0; " + body);
  harness.spawn(1, "W=w1; " + body);
  harness.drain(30s);
  const auto [out, err] = harness.finish();

  // (Parsed by hand: std::regex recurses per character and would overflow on 20000 bytes.)
  std::map<int, int> next;
  for (const std::string& line : splitLines(out)) {
    const auto parsed = parseLine(line, "line");
    REQUIRE(parsed.has_value());
    const auto [worker, number, tail] = *parsed;
    REQUIRE(number == next[worker]);
    REQUIRE(tail == (number % 50 == 0 ? " " + std::string(20000, 'x') : std::string()));
    ++next[worker];
  }
  CHECK(next[0] == 2000);
  CHECK(next[1] == 2000);

  std::map<int, int> errors;
  for (const std::string& line : splitLines(err)) {
    const auto parsed = parseLine(line, "err");
    REQUIRE(parsed.has_value());
    const auto [worker, number, tail] = *parsed;
    REQUIRE(tail.empty());
    REQUIRE(number == errors[worker] * 10);
    ++errors[worker];
  }
  CHECK(errors[0] == 200);
  CHECK(errors[1] == 200);
}

TEST_CASE("a final line without newline is flushed with one at EOF", "[log_router]") {
  Harness harness(LogRouterOptions{});
  harness.spawn(0, "printf 'a\\nno newline'; printf 'half' >&2");
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:a\n[default0]:no newline\n");
  CHECK(err == "[default0]:half\n");
}

TEST_CASE("a line longer than 64 KiB is cut into 64 KiB pieces", "[log_router]") {
  Harness harness(LogRouterOptions{});
  harness.spawn(0, "head -c 150000 /dev/zero | tr '\\0' y; echo; echo after");
  harness.drain(10s);
  const std::vector<std::string> lines = splitLines(harness.finish().first);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "[default0]:" + std::string(LogRouter::kMaxLineBytes, 'y'));
  CHECK(lines[1] == "[default0]:" + std::string(LogRouter::kMaxLineBytes, 'y'));
  CHECK(lines[2] == "[default0]:" + std::string(150000 - 2 * LogRouter::kMaxLineBytes, 'y'));
  CHECK(lines[3] == "[default0]:after");
}

TEST_CASE("long lines are cut on UTF-8 character boundaries", "[log_router]") {
  Harness harness(LogRouterOptions{});
  // 30000 three-byte characters: 64 KiB would fall inside one, so the first piece is 65535 bytes.
  harness.spawn(0, "yes '\xE2\x82\xAC' | head -n 30000 | tr -d '\\n'; echo");
  harness.drain(10s);
  const std::vector<std::string> lines = splitLines(harness.finish().first);
  std::string euros;
  for (int i = 0; i < 30000; ++i) euros += "\xE2\x82\xAC";
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "[default0]:" + euros.substr(0, 65535));
  CHECK(lines[1] == "[default0]:" + euros.substr(65535));
}

TEST_CASE("redirect: the stream goes to its file only", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.redirects = every(true, false);
  Harness harness(options);
  harness.spawn(0, "echo out; printf 'raw'; echo err >&2", dir.file("attempt_0"));
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out.empty());
  CHECK(err == "[default0]:err\n");
  CHECK(readFile(dir.file("attempt_0/0/stdout.log")) == "out\nraw");
  CHECK_FALSE(fs::exists(dir.file("attempt_0/0/stderr.log")));
}

TEST_CASE("redirect per rank: only the ranks listed", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.redirects.perRankGiven = true;
  options.redirects.perRank[1] = StdStreams{false, true};
  Harness harness(options);
  harness.spawn(0, "echo zero >&2", dir.file("a"));
  harness.spawn(1, "echo one >&2", dir.file("a"));
  harness.drain(10s);
  CHECK(harness.finish().second == "[default0]:zero\n");
  CHECK(readFile(dir.file("a/1/stderr.log")) == "one\n");
  CHECK(fs::is_directory(dir.file("a/0")));  // made for error.json even without log files
  CHECK_FALSE(fs::exists(dir.file("a/0/stderr.log")));
}

TEST_CASE("tee: raw to the file and prefixed to the console", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.tee = every(true, true);
  Harness harness(options);
  harness.spawn(0, "echo out; printf 'partial'; echo err >&2", dir.file("attempt_0"));
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:out\n[default0]:partial\n");
  CHECK(err == "[default0]:err\n");
  CHECK(readFile(dir.file("attempt_0/0/stdout.log")) == "out\npartial");
  CHECK(readFile(dir.file("attempt_0/0/stderr.log")) == "err\n");
}

TEST_CASE("without a log dir, redirect falls back to the console and no file is made",
          "[log_router]") {
  LogRouterOptions options;
  options.redirects = every(true, true);
  options.duplicateStdoutFilters = {"x"};
  Harness harness(options);
  harness.spawn(0, "echo x1; echo e >&2");
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:x1\n");
  CHECK(err == "[default0]:e\n");
}

TEST_CASE("local-ranks-filter: other ranks stay off the console", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.localRanksFilter = std::set<int>{0};
  options.tee = every(true, false);
  Harness harness(options);
  harness.spawn(0, "echo zero; echo zero-err >&2", dir.file("a"));
  harness.spawn(1, "echo one; echo one-err >&2", dir.file("a"));
  harness.drain(10s);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:zero\n");
  CHECK(err == "[default0]:zero-err\n");
  // Rank 1's tee'd stdout still reaches its file; its stderr (not tee'd) goes nowhere.
  CHECK(readFile(dir.file("a/1/stdout.log")) == "one\n");
  CHECK_FALSE(fs::exists(dir.file("a/1/stderr.log")));
}

TEST_CASE("duplicate filters copy matching lines to filtered_*.log", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.duplicateStdoutFilters = {"loss", "WARN"};
  options.duplicateStderrFilters = {"ERR"};
  SECTION("console streams") {
    Harness harness(options);
    harness.spawn(0,
                  "echo 'step 1 loss 0.5'; echo hello; echo 'WARN x'; echo 'ERR y' >&2; "
                  "echo other >&2; printf 'last loss'",
                  dir.file("a"));
    harness.drain(10s);
    const auto [out, err] = harness.finish();
    CHECK(out ==
          "[default0]:step 1 loss 0.5\n[default0]:hello\n[default0]:WARN x\n"
          "[default0]:last loss\n");
    CHECK(err == "[default0]:ERR y\n[default0]:other\n");
    CHECK(readFile(dir.file("a/0/filtered_stdout.log")) == "step 1 loss 0.5\nWARN x\nlast loss\n");
    CHECK(readFile(dir.file("a/0/filtered_stderr.log")) == "ERR y\n");
  }
  SECTION("with a redirected stream") {
    options.redirects = every(true, false);
    Harness harness(options);
    harness.spawn(0, "echo 'a loss'; echo plain", dir.file("a"));
    harness.drain(10s);
    CHECK(harness.finish().first.empty());
    CHECK(readFile(dir.file("a/0/stdout.log")) == "a loss\nplain\n");
    CHECK(readFile(dir.file("a/0/filtered_stdout.log")) == "a loss\n");
  }
}

TEST_CASE("a reused attempt directory is appended to, never truncated", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.redirects = every(true, false);
  options.tee = every(false, true);
  Harness harness(options);
  harness.spawn(0, "echo first; echo first-err >&2", dir.file("attempt_0"));
  harness.drain(10s);
  harness.spawn(0, "echo second; echo second-err >&2", dir.file("attempt_0"));
  harness.drain(10s);
  harness.finish();
  CHECK(readFile(dir.file("attempt_0/0/stdout.log")) == "first\nsecond\n");
  CHECK(readFile(dir.file("attempt_0/0/stderr.log")) == "first-err\nsecond-err\n");
}

TEST_CASE("drain: at EOF at once, or after the grace when a grandchild holds the pipe",
          "[log_router]") {
  SECTION("EOF") {
    Harness harness(LogRouterOptions{});
    harness.spawn(0, "echo done");
    harness.spawn(1, "sleep 0.2; echo later");
    const auto took = harness.drain(20s);
    CHECK(took < 5s);
    const auto [out, err] = harness.finish();
    CHECK(out.find("[default0]:done\n") != std::string::npos);
    CHECK(out.find("[default1]:later\n") != std::string::npos);
  }
  SECTION("grace") {
    TempDir dir;
    Harness harness(LogRouterOptions{});
    const std::string pidFile = dir.file("sleeper.pid");
    harness.spawn(0, "sleep 5 & echo $! > " + pidFile + "; printf bye");
    const auto took = harness.drain(300ms);
    CHECK(took >= 300ms);
    CHECK(took < 4s);
    const auto [out, err] = harness.finish();
    CHECK(out == "[default0]:bye\n");
    const pid_t sleeper = std::stoi(readFile(pidFile));
    CHECK(::kill(sleeper, SIGKILL) == 0);
  }
  SECTION("nothing started") {
    Harness harness(LogRouterOptions{});
    CHECK(harness.drain(10s) < 1s);
  }
}

TEST_CASE("closeAll flushes a partial line of a worker still running", "[log_router]") {
  Harness harness(LogRouterOptions{});
  harness.spawn(0, "printf 'partial'; exec sleep 30");
  harness.io().run_for(500ms);
  const auto [out, err] = harness.finish();
  CHECK(out == "[default0]:partial\n");
}

TEST_CASE("abandon closes what prepare opened and prepare errors name the path", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.tee = every(true, true);
  Harness harness(options);
  const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, dir.file("a"), true);
  CHECK(fdIsOpen(streams.out));
  CHECK(fdIsOpen(streams.err));
  CHECK((::fcntl(streams.out, F_GETFD) & FD_CLOEXEC) != 0);
  harness.router().abandon(0);
  CHECK_FALSE(fdIsOpen(streams.out));
  CHECK_FALSE(fdIsOpen(streams.err));

  writeFile(dir.file("file"), "x");
  try {
    harness.router().prepare(0, 0, 0, 0, dir.file("file/attempt_0"), true);
    FAIL("prepare did not throw");
  } catch (const std::system_error& error) {
    CHECK(std::string(error.what()).find(dir.file("file/attempt_0")) != std::string::npos);
  }
  harness.finish();
}

TEST_CASE("a redirected, filtered-out rank writes straight to its file", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.redirects = every(true, true);
  Harness harness(options);
  const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, dir.file("a"), true);
  struct stat info {};
  REQUIRE(::fstat(streams.out, &info) == 0);
  CHECK(S_ISREG(info.st_mode));  // no pipe, no copying by the agent
  harness.router().abandon(0);
  harness.finish();
}

// A worker script's wait for the test: until `path` exists (the harness kills it at the end).
std::string waitFor(const std::string& path) {
  return "while [ ! -e " + path + " ]; do sleep 0.01; done; ";
}

TEST_CASE("a partial line reaches the console after the hold, and its rest follows",
          "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.partialLineDelay = 20ms;
  Harness harness(options);
  harness.spawn(0, "printf 'abc'; " + waitFor(dir.file("go")) + "echo def");
  INFO("console so far: " << harness.outSoFar());
  REQUIRE(harness.runUntilOut("[default0]:abc"));
  CHECK(harness.outSoFar() == "[default0]:abc");  // no '\n' of its own: the line is still open
  writeFile(dir.file("go"), "");
  harness.drain(10s);
  CHECK(harness.finish().first == "[default0]:abcdef\n");
}

TEST_CASE("within the hold, a line written in pieces stays whole", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.partialLineDelay = 60s;  // longer than the test: only the '\n' lets the line out
  Harness harness(options);
  harness.spawn(0, "printf 'a'; " + waitFor(dir.file("go")) + "echo b");
  harness.spawn(1, "echo x");
  REQUIRE(harness.runUntilOut("[default1]:x\n"));
  writeFile(dir.file("go"), "");
  harness.drain(10s);
  CHECK(harness.finish().first == "[default1]:x\n[default0]:ab\n");
}

TEST_CASE("two workers never share a console line: an open line is ended first", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.partialLineDelay = 1ms;
  Harness harness(options);
  harness.spawn(0, "printf 'abc'; " + waitFor(dir.file("go0")) + "echo def");
  harness.spawn(1, waitFor(dir.file("go1")) + "echo xyz");
  REQUIRE(harness.runUntilOut("[default0]:abc"));
  writeFile(dir.file("go1"), "");
  REQUIRE(harness.runUntilOut("[default1]:xyz\n"));
  writeFile(dir.file("go0"), "");
  harness.drain(10s);
  // Rank 0's line continues on a line of its own, under its prefix.
  CHECK(harness.finish().first == "[default0]:abc\n[default1]:xyz\n[default0]:def\n");
}

TEST_CASE("a line redrawn after a carriage return keeps its prefix", "[log_router]") {
  TempDir dir;
  LogRouterOptions options;
  options.partialLineDelay = 1ms;
  Harness harness(options);
  harness.spawn(0, "printf '\\r 10%%'; " + waitFor(dir.file("go")) +
                       "printf '\\r 20%%\\r 30%%\\n'; printf 'crlf\\r\\n'");
  REQUIRE(harness.runUntilOut("[default0]: 10%"));
  writeFile(dir.file("go"), "");
  harness.drain(10s);
  CHECK(harness.finish().first ==
        "\r[default0]: 10%\r[default0]: 20%\r[default0]: 30%\n[default0]:crlf\r\n");
}

TEST_CASE("one console: a worker's stdout and stderr share one channel and keep their order",
          "[log_router]") {
  SECTION("the order is the worker's") {
    Harness harness(LogRouterOptions{}, false, Consoles::kOne);
    harness.spawn(0,
                  "i=0; while [ $i -lt 500 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done; "
                  "echo last-words >&2");
    harness.drain(30s);
    // The "stderr tail" is the channel's: stdout's lines are in it too.
    const std::vector<std::string> tail = harness.router().stderrTail(0);
    REQUIRE(tail.size() >= 2);
    CHECK(tail.back() == "last-words");
    CHECK(tail[tail.size() - 2] == "err 499");
    CHECK(tail[tail.size() - 3] == "out 499");
    const std::vector<std::string> lines = splitLines(harness.finish().first);
    REQUIRE(lines.size() == 1001);
    for (int i = 0; i < 500; ++i) {
      REQUIRE(lines[2 * i] == "[default0]:out " + std::to_string(i));
      REQUIRE(lines[2 * i + 1] == "[default0]:err " + std::to_string(i));
    }
  }
  SECTION("one descriptor for fd 1 and 2") {
    Harness harness(LogRouterOptions{}, false, Consoles::kOne);
    const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, "", false);
    CHECK(streams.out == streams.err);
    CHECK(fdIsOpen(streams.out));
    harness.router().abandon(0);
    CHECK_FALSE(fdIsOpen(streams.out));
    harness.finish();
  }
  SECTION("a file for a stream (-t) keeps two channels; both still reach the one console") {
    TempDir dir;
    LogRouterOptions options;
    options.tee = every(false, true);
    Harness harness(options, false, Consoles::kOne);
    const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, dir.file("a"), true);
    CHECK(streams.out != streams.err);
    harness.router().abandon(0);
    harness.spawn(0, "echo out; sleep 0.1; echo err >&2", dir.file("a"));
    harness.drain(10s);
    CHECK(harness.finish().first == "[default0]:out\n[default0]:err\n");
    CHECK(readFile(dir.file("a/0/stderr.log")) == "err\n");
  }
  SECTION("a passed-through worker keeps the agent's own descriptors") {
    LogRouterOptions options;
    options.passThrough = true;
    Harness harness(options, false, Consoles::kOne);
    const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, "", false);
    CHECK(streams.out != streams.err);
    harness.router().abandon(0);
    harness.finish();
  }
}

TEST_CASE("two consoles: stdout and stderr keep a channel each", "[log_router]") {
  Harness harness(LogRouterOptions{});
  const ChildStreams streams = harness.router().prepare(0, 0, 0, 0, "", false);
  CHECK(streams.out != streams.err);
  harness.router().abandon(0);
  harness.finish();
}
