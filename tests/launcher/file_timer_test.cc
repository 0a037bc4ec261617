// torch's FileTimer protocol as the agent serves it: request lines parsed as torch's server reads
// them, timers kept and expired by torch's rule on one timer armed for the earliest deadline (a
// manual clock), the FIFO the clients write to (real, on an io_context), and torch 1.13's own
// FileTimerClient talking to both.
#include "hang/file_timer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "agent/asio_event_loop.h"
#include "agent_fakes.h"
#include "hang/file_timer_pipe.h"
#include "log_capture.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;

constexpr int kSkip = 77;

// The manual loop, counting the timers armed and not yet fired or cancelled: FileTimers must
// hold exactly one while it has timers, and none without.
class CountingLoop final : public EventLoop {
 public:
  TimePoint now() const override { return manual.now(); }
  WallTime wallNow() const override { return manual.wallNow(); }
  std::unique_ptr<Timer> after(std::chrono::milliseconds delay, Callback callback) override {
    auto pending = std::make_shared<bool>(true);
    pending_.push_back(pending);
    delays.push_back(delay);
    auto inner = manual.after(delay, [pending, callback = std::move(callback)] {
      *pending = false;
      callback();
    });
    return std::make_unique<CountedTimer>(std::move(inner), pending);
  }
  void post(Callback callback) override { manual.post(std::move(callback)); }

  // Epoch seconds on the manual wall clock.
  double epoch() const {
    return std::chrono::duration<double>(manual.wallNow().time_since_epoch()).count();
  }
  std::size_t armed() const {
    std::size_t count = 0;
    for (const auto& pending : pending_) count += *pending ? 1 : 0;
    return count;
  }
  void advance(std::chrono::milliseconds delta) { manual.advance(delta); }

  ManualEventLoop manual;
  std::vector<std::chrono::milliseconds> delays;  // of every after(), in order

 private:
  class CountedTimer final : public Timer {
   public:
    CountedTimer(std::unique_ptr<Timer> inner, std::shared_ptr<bool> pending)
        : inner_(std::move(inner)), pending_(std::move(pending)) {}
    ~CountedTimer() override { *pending_ = false; }
    void cancel() override {
      *pending_ = false;
      inner_->cancel();
    }

   private:
    std::unique_ptr<Timer> inner_;
    std::shared_ptr<bool> pending_;
  };
  std::vector<std::shared_ptr<bool>> pending_;
};

// FileTimers on the counting loop, with every expiry it reports.
struct Fixture {
  CountingLoop loop;
  std::vector<FileTimerExpiry> expired;
  FileTimers timers{loop, [this](const FileTimerExpiry& expiry) { expired.push_back(expiry); }};

  // Sets (pid, scope) to expire `in` seconds from now on the manual clock.
  void set(pid_t pid, const std::string& scope, double in, int signal = SIGKILL) {
    timers.apply({1, pid, scope, loop.epoch() + in, signal});
  }
  void release(pid_t pid, const std::string& scope) { timers.apply({1, pid, scope, -1, 0}); }
};

std::string describe(const std::vector<FileTimerExpiry>& expired) {
  std::ostringstream out;
  for (const auto& expiry : expired) {
    out << "pid " << expiry.pid << " scope " << expiry.scopeId << " signal " << expiry.signal
        << "\n";
  }
  return out.str();
}

// --- refusals (AgentMachine refuses to signal a pid that is not the job's) ---

TEST_CASE(
    "refusals: the first logged in full, the rest counted per window, a quiet window "
    "starts over",
    "[file_timer]") {
  CountingLoop loop;
  FileTimerRefusals refusals(loop, 10s);
  LogCapture log;
  refusals.refused({4242, "s\x1b[2J\n[x", SIGKILL, 0});
  std::string logged = log.text();
  CHECK(std::count(logged.begin(), logged.end(), '\n') == 1);
  CHECK_THAT(logged,
             Catch::Contains("not sending SIGKILL to pid 4242: FileTimer \"s\\x1b[2J\\n[x\""));
  for (pid_t pid = 1; pid <= 20; ++pid) refusals.refused({pid % 10 + 100, "x", SIGKILL, 0});
  CHECK(log.text() == logged);
  loop.advance(10s);
  logged = log.text();
  CHECK(std::count(logged.begin(), logged.end(), '\n') == 2);
  CHECK_THAT(logged,
             Catch::Contains("refused 20 more FileTimer signal(s) to processes outside this "
                             "agent's workers (pids 101, 102, 103, 104, 105, 106, 107, 108, ...)"));
  // The next window: quiet, so the one after it starts with a line in full again.
  loop.advance(10s);
  CHECK(log.text() == logged);
  CHECK(loop.armed() == 0);
  refusals.refused({4343, "y", SIGTERM, 0});
  CHECK_THAT(log.text().substr(logged.size()), Catch::Contains("not sending SIGTERM to pid 4343"));
  // Counted and not logged yet: flush() logs it (the agent is finishing).
  refusals.refused({4444, "z", SIGTERM, 0});
  refusals.flush();
  CHECK_THAT(log.text(),
             Catch::Contains("refused 1 more FileTimer signal(s) to processes outside this "
                             "agent's workers (pids 4444)"));
  CHECK(refusals.total() == 23);
}

TEST_CASE("parse: a malformed request is quoted escaped, on one line", "[file_timer]") {
  Fixture fixture;
  LogCapture log;
  fixture.timers.onLine("{\"pid\": \x1b[2J\n\x07}");
  const std::string text = log.text();
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK_THAT(text, Catch::Contains("\\x1b[2J\\n\\x07}"));
}

// --- parsing ---

TEST_CASE("parse: the lines torch's FileTimerClient writes", "[file_timer]") {
  // json.dumps of FileTimerRequest.to_json(), as torch 1.13 writes them.
  const auto acquire = parseFileTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1767225605.25, "signal": 9})");
  REQUIRE(acquire);
  CHECK(acquire->version == 1);
  CHECK(acquire->pid == 4242);
  CHECK(acquire->scopeId == "step");
  CHECK(acquire->expirationTime == 1767225605.25);
  CHECK(acquire->signal == 9);

  const auto release = parseFileTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": -1, "signal": 0})");
  REQUIRE(release);
  CHECK(release->expirationTime == -1);
  CHECK(release->signal == 0);

  // An integer deadline; keys in any order; no "version" (torch's server never reads it).
  const auto integral = parseFileTimerRequest(
      R"({"signal": 15, "expiration_time": 1767225605, "scope_id": "", "pid": 7})");
  REQUIRE(integral);
  CHECK(integral->expirationTime == 1767225605.0);
  CHECK(integral->scopeId.empty());
  CHECK(integral->signal == 15);
}

TEST_CASE(
    "parse: missing keys, wrong types and non-JSON are dropped with one warning naming the fault",
    "[file_timer]") {
  struct Bad {
    std::string line;
    std::string fault;  // what the warning must name
  };
  const std::vector<Bad> bad = {
      {"not json at all", "not JSON"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 5)", "not JSON"},  // cut short
      {R"([1, "s", 5, 9])", "not a JSON object"},
      {R"({"version": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})", R"(no "pid")"},
      {R"({"version": 1, "pid": 1, "expiration_time": 5, "signal": 9})", R"(no "scope_id")"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "signal": 9})", R"(no "expiration_time")"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5})", R"(no "signal")"},
      {R"({"version": 1, "pid": "1", "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("pid" is not an integer)"},
      {R"({"version": 1, "pid": 1.5, "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("pid" is not an integer)"},
      {R"({"version": 1, "pid": 1, "scope_id": 3, "expiration_time": 5, "signal": 9})",
       R"("scope_id" is not a string)"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": "5", "signal": 9})",
       R"("expiration_time" is not a number)"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9.0})",
       R"("signal" is not an integer)"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": true})",
       R"("signal" is not an integer)"},
      {R"({"version": "1", "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("version" is not an integer)"},
      // kill(0) and kill(-1) would reach the agent's own process group or everything.
      {R"({"version": 1, "pid": 0, "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("pid" is out of range)"},
      {R"({"version": 1, "pid": -1, "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("pid" is out of range)"},
      {R"({"version": 1, "pid": 99999999999, "scope_id": "s", "expiration_time": 5, "signal": 9})",
       R"("pid" is out of range)"},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 4294967305})",
       R"("signal" is out of range)"},
  };
  Fixture fixture;
  for (const auto& [line, fault] : bad) {
    INFO(line);
    CHECK_FALSE(parseFileTimerRequest(line));
    LogCapture log;
    fixture.timers.onLine(line);
    const std::string text = log.text();
    CHECK_THAT(text, Catch::Contains("[warning]") && Catch::Contains(fault));
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  }
  CHECK(fixture.timers.size() == 0);
  CHECK(fixture.loop.armed() == 0);

  // A blank line is no request, but nothing is wrong with it either.
  LogCapture log;
  fixture.timers.onLine("");
  CHECK(log.text().empty());
}

// --- the timers ---

TEST_CASE("timers: set, replace and release by (pid, scope_id)", "[file_timer]") {
  Fixture f;
  f.timers.onLine(fmt::format(
      R"({{"version": 1, "pid": 10, "scope_id": "a", "expiration_time": {}, "signal": 9}})",
      f.loop.epoch() + 5));
  f.set(10, "b", 5);
  f.set(11, "a", 5);
  CHECK(f.timers.size() == 3);
  f.set(10, "a", 50);  // replaces (10, "a")
  CHECK(f.timers.size() == 3);
  f.release(10, "b");
  f.release(10, "b");  // twice, and one never set: nothing happens
  f.release(12, "a");
  CHECK(f.timers.size() == 2);

  // The replaced deadline holds, not the first one; the released timer never fires.
  f.loop.advance(10s);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == 11);
  f.loop.advance(40s);
  REQUIRE(f.expired.size() == 2);
  CHECK(f.expired[1].pid == 10);
  CHECK(f.expired[1].scopeId == "a");
  CHECK(f.timers.size() == 0);
}

TEST_CASE("timers: one timer is armed, for the earliest deadline, and none fires early",
          "[file_timer]") {
  Fixture f;
  CHECK(f.loop.armed() == 0);
  f.set(1, "late", 9);
  f.set(2, "early", 2.5);
  f.set(3, "middle", 5.0004);  // between whole milliseconds: rounded up
  CHECK(f.loop.armed() == 1);
  CHECK(f.loop.delays.back() == 2500ms);

  f.loop.advance(2499ms);
  CHECK(f.expired.empty());
  f.loop.advance(1ms);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].scopeId == "early");
  // Re-armed for the next one, 5.0004 s after the start: 2501 ms from here, not 2500.
  CHECK(f.loop.armed() == 1);
  CHECK(f.loop.delays.back() == 2501ms);
  f.loop.advance(2500ms);
  CHECK(f.expired.size() == 1);
  f.loop.advance(1ms);
  REQUIRE(f.expired.size() == 2);
  CHECK(f.expired[1].scopeId == "middle");

  // Releasing the earliest moves the one timer to the next deadline; the last release disarms.
  f.set(4, "soon", 1);
  CHECK(f.loop.armed() == 1);
  f.release(4, "soon");
  CHECK(f.loop.armed() == 1);
  f.release(1, "late");
  CHECK(f.loop.armed() == 0);
  f.loop.advance(60s);
  CHECK(f.expired.size() == 2);

  // A deadline already past is due at once; one far in the future arms a bounded wait.
  f.timers.apply({1, 5, "past", f.loop.epoch() - 100, SIGKILL});
  f.loop.advance(0ms);
  REQUIRE(f.expired.size() == 3);
  CHECK(f.expired[2].pid == 5);
  f.timers.apply({1, 6, "far", 1e300, SIGKILL});
  CHECK(f.loop.armed() == 1);
  CHECK(f.loop.delays.back() <= 24h);
  f.loop.advance(25h);
  CHECK(f.expired.size() == 3);
  CHECK(f.loop.armed() == 1);
}

TEST_CASE(
    "timers: per pid the earliest due timer with a signal is reported, then all its timers go",
    "[file_timer]") {
  Fixture f;
  const double start = f.loop.epoch();
  f.set(7, "no-signal", 1, 0);   // due first, but has no signal
  f.set(7, "term", 2, SIGTERM);  // the earliest due one with a signal
  f.set(7, "kill", 3, SIGKILL);  // due too, later
  f.set(7, "not-due", 100, SIGKILL);
  f.set(8, "other", 3, SIGUSR1);  // another pid, due at the same time
  f.set(9, "later", 100, SIGKILL);

  f.loop.advance(1s);  // only the signal-less timer is due: nobody is reported
  CHECK(f.expired.empty());
  f.loop.advance(1s);  // "term" is due alone
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == 7);
  CHECK(f.expired[0].scopeId == "term");
  CHECK(f.expired[0].signal == SIGTERM);
  CHECK(f.expired[0].expirationTime == start + 2);
  // torch's clear_timers(reaped pids): "kill" and "not-due" went with it.
  CHECK(f.timers.size() == 2);

  f.loop.advance(1s);
  REQUIRE(f.expired.size() == 2);
  CHECK(f.expired[1].pid == 8);
  CHECK(f.expired[1].signal == SIGUSR1);
  f.loop.advance(200s);
  REQUIRE(f.expired.size() == 3);
  CHECK(f.expired[2].pid == 9);
  CHECK(f.timers.size() == 0);

  SECTION("several timers of a pid due at once: one report, the earliest with a signal") {
    f.set(20, "c", 3, SIGKILL);
    f.set(20, "a", 1, 0);
    f.set(20, "b", 2, SIGINT);
    f.loop.advance(10s);
    REQUIRE(f.expired.size() == 4);
    CHECK(f.expired[3].scopeId == "b");
    CHECK(f.expired[3].signal == SIGINT);
    CHECK(f.timers.size() == 0);
  }
}

TEST_CASE(
    "timers: signal 0 timers never kill, are dropped once due, and do not wake the loop again",
    "[file_timer]") {
  Fixture f;
  f.set(5, "no-signal", 1, 0);
  f.set(5, "negative", 1, -3);
  f.set(5, "kill-later", 10, SIGKILL);
  f.loop.advance(1s);
  CHECK(f.expired.empty());
  // torch keeps the signal-less timers of a pid it does not reap; they would be due on every
  // pass. Here they are gone and the one timer waits for the next real deadline.
  CHECK(f.timers.size() == 1);
  CHECK(f.loop.armed() == 1);
  CHECK(f.loop.delays.back() == 9s);
  f.loop.advance(9s);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].scopeId == "kill-later");
  CHECK(f.loop.armed() == 0);
}

TEST_CASE("timers: forget drops one pid's timers, clear drops all", "[file_timer]") {
  Fixture f;
  f.set(1, "a", 1);
  f.set(1, "b", 2);
  f.set(2, "a", 3);
  f.set(3, "a", 4);
  f.timers.forget(1);
  f.timers.forget(99);  // unknown: nothing happens
  CHECK(f.timers.size() == 2);
  CHECK(f.loop.armed() == 1);
  CHECK(f.loop.delays.back() == 3s);
  f.loop.advance(3s);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == 2);

  f.timers.clear();
  CHECK(f.timers.size() == 0);
  CHECK(f.loop.armed() == 0);
  f.loop.advance(10s);
  CHECK(f.expired.size() == 1);
}

TEST_CASE("timers: the expiry callback may forget, clear and apply", "[file_timer]") {
  CountingLoop loop;
  std::vector<FileTimerExpiry> expired;
  std::function<void(const FileTimerExpiry&)> react;
  FileTimers timers(loop, [&](const FileTimerExpiry& expiry) {
    expired.push_back(expiry);
    if (react) react(expiry);
  });
  auto set = [&](pid_t pid, const std::string& scope, double in) {
    timers.apply({1, pid, scope, loop.epoch() + in, SIGKILL});
  };

  SECTION("forget of a pid due in the same pass: it is not reported") {
    set(1, "a", 1);
    set(2, "a", 1);
    set(3, "a", 5);
    react = [&](const FileTimerExpiry&) { timers.forget(2); };
    loop.advance(1s);
    REQUIRE(expired.size() == 1);
    CHECK(expired[0].pid == 1);
    CHECK(timers.size() == 1);
    CHECK(loop.armed() == 1);
    loop.advance(4s);
    CHECK(expired.size() == 2);
  }
  SECTION("clear: nothing more is reported and nothing is armed") {
    set(1, "a", 1);
    set(2, "a", 1);
    set(3, "a", 5);
    react = [&](const FileTimerExpiry&) { timers.clear(); };
    loop.advance(1s);
    CHECK(expired.size() == 1);
    CHECK(timers.size() == 0);
    CHECK(loop.armed() == 0);
    loop.advance(10s);
    CHECK(expired.size() == 1);
  }
  SECTION("apply: a new timer (even one of the reported pid) is armed for once the pass is over") {
    set(1, "a", 1);
    react = [&](const FileTimerExpiry& expiry) {
      if (expiry.scopeId == "a") {
        set(1, "again", 2);
        set(4, "new", 3);
        timers.apply({1, 1, "released", -1, 0});
      }
    };
    loop.advance(1s);
    REQUIRE(expired.size() == 1);
    CHECK(timers.size() == 2);
    CHECK(loop.armed() == 1);
    CHECK(loop.delays.back() == 2s);
    loop.advance(2s);
    REQUIRE(expired.size() == 2);
    CHECK(expired[1].scopeId == "again");
    loop.advance(1s);
    REQUIRE(expired.size() == 3);
    CHECK(expired[2].scopeId == "new");
    CHECK(loop.armed() == 0);
  }
  SECTION(
      "apply of a timer already due: reported on the next turn, not in a loop within this one") {
    set(1, "a", 1);
    int reports = 0;
    react = [&](const FileTimerExpiry&) {
      if (++reports < 3) set(1, "again", -10);
    };
    loop.advance(1s);  // ManualEventLoop runs the due re-armed timers too, one turn each
    CHECK(expired.size() == 3);
    CHECK(std::count(loop.delays.begin(), loop.delays.end(), 0ms) == 2);
    CHECK(loop.armed() == 0);
  }
}

// --- the named pipe ---

// Opens the FIFO as torch's client does (non-blocking, for writing), writes each of `writes`
// with its own write(2), closes.
void writeAsClient(const std::string& path, const std::vector<std::string>& writes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (const std::string& chunk : writes) {
    REQUIRE(::write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size()));
  }
  ::close(fd);
}

// Runs what is ready on `io` (the reads), for waits that poll.
void pump(boost::asio::io_context& io) {
  if (io.stopped()) io.restart();
  io.poll();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& line : lines) all += "[" + line + "]\n";
  return all;
}

TEST_CASE("timers: a stopped job (pause, resume) gets its stopped time added to every deadline",
          "[file_timer]") {
  Fixture f;
  const double start = f.loop.epoch();
  f.set(7, "step", 2);
  f.set(8, "step", 5, SIGTERM);
  f.loop.advance(1s);
  f.timers.pause();
  CHECK(f.loop.armed() == 0);
  f.loop.advance(100s);  // stopped: nothing fires, whatever the clock says
  CHECK(f.expired.empty());
  f.set(9, "late", 1);  // taken while stopped (read from the pipe just before the stop)
  CHECK(f.loop.armed() == 0);
  f.timers.resume();
  CHECK(f.loop.armed() == 1);
  f.loop.advance(999ms);
  CHECK(f.expired.empty());
  f.loop.advance(1ms);  // pid 7 ran 1 s before the stop and 1 s after: its 2 s are up
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == 7);
  CHECK(f.expired[0].expirationTime == start + 102);
  f.loop.advance(3s);
  REQUIRE(f.expired.size() == 2);
  CHECK(f.expired[1].pid == 8);
  // pid 9's request came at 101 s with 1 s to go; it was moved on by the stop as well.
  CHECK(f.timers.size() == 1);
  f.loop.advance(98s);
  REQUIRE(f.expired.size() == 3);
  CHECK(f.expired[2].pid == 9);
}

TEST_CASE("pipe: readAvailable() takes what is in the pipe now, without the loop",
          "[file_timer][pipe]") {
  TempDir dir;
  const std::string path = dir.path + "/timer.pipe";
  boost::asio::io_context io;
  std::vector<std::string> lines;
  FileTimerPipe pipe(io, path, [&](std::string_view line) { lines.emplace_back(line); });
  writeAsClient(path, {"one\ntwo\nthr"});
  pipe.readAvailable();
  CHECK(lines == std::vector<std::string>{"one", "two"});
  writeAsClient(path, {"ee\n"});
  pipe.readAvailable();
  CHECK(lines == std::vector<std::string>{"one", "two", "three"});
  pipe.readAvailable();  // an empty pipe: nothing, at once
  pump(io);              // and the loop's own read finds nothing twice
  CHECK(lines.size() == 3);
}

TEST_CASE("pipe: lines from non-blocking writers arrive whole, and the FIFO goes with the pipe",
          "[file_timer][pipe]") {
  TempDir dir;
  const std::string path = dir.path + "/timer.pipe";
  boost::asio::io_context io;
  std::vector<std::string> lines;
  auto pipe = std::make_unique<FileTimerPipe>(
      io, path, [&](std::string_view line) { lines.emplace_back(line); });
  CHECK(pipe->path() == path);
  CHECK(std::filesystem::is_fifo(path));
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));

  writeAsClient(path, {"one\n"});
  writeAsClient(path, {"two\nthree\n"});                         // several lines in one write
  writeAsClient(path, {R"({"pid": 1, "sco)", "pe_id\": 2}\n"});  // one line in two writes
  writeAsClient(path, {"half of a line", " finished by the same client\n"});
  const std::vector<std::string> expected = {"one", "two", "three", R"({"pid": 1, "scope_id": 2})",
                                             "half of a line finished by the same client"};
  CHECK(eventually(
      [&] {
        pump(io);
        return lines.size() >= expected.size();
      },
      10s, [&] { return joined(lines); }));
  CHECK(lines == expected);

  // A partial line waits for its newline, even across clients.
  writeAsClient(path, {"start"});
  pump(io);
  CHECK(lines.size() == expected.size());
  writeAsClient(path, {" end\n"});
  CHECK(eventually(
      [&] {
        pump(io);
        return lines.size() == expected.size() + 1;
      },
      10s, [&] { return joined(lines); }));
  CHECK(lines.back() == "start end");

  pipe.reset();
  CHECK_FALSE(std::filesystem::exists(path));
  // torch's client now gets ENOENT from its open (its BrokenPipeError), and never blocks.
  CHECK(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC) == -1);
}

TEST_CASE("pipe: a stale file is replaced, an over-long line is dropped with a warning",
          "[file_timer][pipe]") {
  TempDir dir;
  const std::string path = dir.path + "/timer.pipe";
  { std::ofstream(path) << "left by a dead agent\n"; }
  boost::asio::io_context io;
  std::vector<std::string> lines;
  LogCapture log;
  FileTimerPipe pipe(io, path, [&](std::string_view line) { lines.emplace_back(line); });
  CHECK(std::filesystem::is_fifo(path));

  // 64 KiB is the most a line may hold: exactly that passes, a byte more does not. The lines
  // are more than the pipe holds: written in pieces, non-blocking, with reads in between.
  const std::string longest(64 * 1024, 'x');
  const std::string tooLong(64 * 1024 + 1, 'y');
  const std::string all = longest + "\nfirst\n" + tooLong + "\nsecond\n";
  const Deadline deadline(10s);
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::size_t written = 0;
  while (written < all.size() && deadline.left() > 0ms) {
    const ssize_t n =
        ::write(fd, all.data() + written, std::min<std::size_t>(all.size() - written, 4000));
    if (n > 0) {
      written += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN) {
      pump(io);  // the pipe is full
    } else {
      break;
    }
  }
  ::close(fd);
  REQUIRE(written == all.size());
  REQUIRE(eventually(
      [&] {
        pump(io);
        return lines.size() >= 3;
      },
      deadline.left(),
      [&] {
        std::string seen;
        for (const auto& line : lines)
          seen += std::to_string(line.size()) + " bytes: " + line.substr(0, 20) + "\n";
        return seen;
      }));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == longest);
  CHECK(lines[1] == "first");
  CHECK(lines[2] == "second");
  const std::string text = log.text();
  CHECK_THAT(text, Catch::Contains("dropping a line of over 65536 bytes") && Catch::Contains(path));
}

TEST_CASE("pipe: a path that cannot be made throws, naming it", "[file_timer][pipe]") {
  boost::asio::io_context io;
  const std::string path = "/nonexistent-ddprun-dir/timer.pipe";
  try {
    FileTimerPipe pipe(io, path, [](std::string_view) {});
    FAIL("no exception");
  } catch (const std::system_error& error) {
    CHECK_THAT(error.what(), Catch::Contains(path));
    CHECK(error.code() == std::errc::no_such_file_or_directory);
  }
}

TEST_CASE("pipe: no line is delivered after destruction, even when the callback destroys it",
          "[file_timer][pipe]") {
  TempDir dir;
  const std::string path = dir.path + "/timer.pipe";
  boost::asio::io_context io;
  std::vector<std::string> lines;

  SECTION("destroyed with data unread") {
    auto pipe = std::make_unique<FileTimerPipe>(
        io, path, [&](std::string_view line) { lines.emplace_back(line); });
    writeAsClient(path, {"unread\n"});
    pipe.reset();
    io.run_for(100ms);
    CHECK(lines.empty());
  }
  SECTION("destroyed by its own callback: the rest of the read is not delivered") {
    std::unique_ptr<FileTimerPipe> pipe;
    pipe = std::make_unique<FileTimerPipe>(io, path, [&](std::string_view line) {
      lines.emplace_back(line);
      pipe.reset();
    });
    writeAsClient(path, {"first\nsecond\nthird\n"});
    CHECK(eventually(
        [&] {
          pump(io);
          return !lines.empty();
        },
        10s, [&] { return joined(lines); }));
    io.run_for(100ms);
    CHECK(lines == std::vector<std::string>{"first"});
    CHECK(pipe == nullptr);
    CHECK_FALSE(std::filesystem::exists(path));
  }
}

// --- torch 1.13's own client ---

TEST_CASE("torch 1.13: FileTimerClient's acquire and release reach FileTimers through the pipe",
          "[file_timer][torch113]") {
  const std::string python = DDPRUN_TORCH113_PYTHON;
  if (python.empty() || ::access(python.c_str(), X_OK) != 0) {
    SUCCEED("no " + python + ": nothing to run torch's client with");
    return;
  }
  TempDir dir;
  const std::string path = dir.path + "/timer.pipe";
  boost::asio::io_context io;
  AsioEventLoop loop(io);
  std::vector<FileTimerRequest> requests;
  std::vector<FileTimerExpiry> expired;
  FileTimers timers(loop, [&](const FileTimerExpiry& expiry) { expired.push_back(expiry); });
  FileTimerPipe pipe(io, path, [&](std::string_view line) {
    if (auto request = parseFileTimerRequest(line)) requests.push_back(*request);
    timers.onLine(line);
  });

  // The client's default signal (SIGKILL) for "step" and "short"; "step" is released again, and
  // "short" expires for real 0.5 s after it was set (nothing is killed: the test only records).
  const char* script = R"(import os, sys, time
try:
    from torch.distributed.elastic.timer.file_based_local_timer import FileTimerClient
except ImportError as error:
    print("no torch:", error, file=sys.stderr)
    sys.exit(77)
client = FileTimerClient(sys.argv[1])
start = time.time()
client.acquire("step", start + 1000)
client.acquire("short", start + 0.5)
client.release("step")
print(repr(start), flush=True)
)";
  Subprocess client({python, "-c", script, path});
  const Deadline deadline(90s);
  const std::optional<int> status = exitStatus(client, deadline.left());
  REQUIRE(status);
  if (*status == kSkip) {
    SUCCEED("torch cannot be imported: " + client.errors());
    return;
  }
  REQUIRE(*status == 0);
  const double start = std::stod(client.output());

  auto seen = [&] {
    std::string text = "requests:\n";
    for (const auto& r : requests) {
      text += fmt::format("  pid {} scope {} expiration {} signal {}\n", r.pid, r.scopeId,
                          r.expirationTime, r.signal);
    }
    return text + "expired:\n" + describe(expired) + client.describe();
  };
  REQUIRE(eventually(
      [&] {
        pump(io);
        return requests.size() >= 3;
      },
      deadline.left(), seen));
  REQUIRE(requests.size() == 3);
  for (const auto& request : requests) CHECK(request.pid == client.pid());
  CHECK(requests[0].scopeId == "step");
  CHECK(requests[0].expirationTime == start + 1000);
  CHECK(requests[0].signal == SIGKILL);
  CHECK(requests[1].scopeId == "short");
  CHECK(requests[1].expirationTime == start + 0.5);
  CHECK(requests[2].scopeId == "step");
  CHECK(requests[2].expirationTime == -1);
  CHECK(requests[2].signal == 0);

  REQUIRE(eventually(
      [&] {
        pump(io);
        return !expired.empty();
      },
      deadline.left(), seen));
  CHECK(std::chrono::system_clock::now() >=
        std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::duration<double>(start + 0.5))));
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == client.pid());
  CHECK(expired[0].scopeId == "short");
  CHECK(expired[0].signal == SIGKILL);
  CHECK(timers.size() == 0);
}

}  // namespace
