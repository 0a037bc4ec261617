// The progress monitor: heartbeat files as the workers use them (one os.utime per report), and the
// monitor's verdicts and wake-ups on a manual clock.
#include "hang/progress_monitor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "agent_fakes.h"
#include "core/proc_stat.h"
#include "hang/line_progress.h"
#include "hang/worker_activity.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;
using namespace std::chrono_literals;

// Counts the timers armed, to see how often the monitor wakes.
struct CountingLoop final : EventLoop {
  ManualEventLoop inner;
  int armed = 0;
  TimePoint now() const override { return inner.now(); }
  WallTime wallNow() const override { return inner.wallNow(); }
  std::unique_ptr<Timer> after(std::chrono::milliseconds delay, Callback callback) override {
    ++armed;
    return inner.after(delay, std::move(callback));
  }
  void post(Callback callback) override { inner.post(std::move(callback)); }
};

}  // namespace

TEST_CASE("heartbeat files: none reported after prepare, a utime of the file is a report",
          "[progress][unit]") {
  TempDir dir;
  HeartbeatFiles files(dir.path);
  const std::string path = files.prepare(3);
  CHECK(path == dir.path + "/heartbeat-3");
  CHECK_FALSE(files.lastReport(3).has_value());
  const auto before = std::chrono::system_clock::now() - 1s;
  REQUIRE(::utime(path.c_str(), nullptr) == 0);  // Python: os.utime(path)
  const auto report = files.lastReport(3);
  REQUIRE(report.has_value());
  CHECK(*report >= before);
  // A new attempt starts with no report again.
  files.prepare(3);
  CHECK_FALSE(files.lastReport(3).has_value());
  CHECK_FALSE(files.lastReport(4).has_value());  // no file at all
}

TEST_CASE("heartbeat files: in the agent's directory itself, no directory of their own",
          "[progress][unit]") {
  // Every directory costs a launch a mkdir and a removal (docs/benchmarks.md, eighth pass): the
  // files of all the workers, every attempt, are plain files of the one directory.
  TempDir dir;
  HeartbeatFiles files(dir.path);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 8; ++rank) files.prepare(rank);
  }
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    ++entries;
    CHECK(entry.is_regular_file());
  }
  CHECK(entries == 8);
  // Still the agent's own directory only: a missing one is made (mode 0700), a link refused.
  HeartbeatFiles inNew(dir.path + "/made");
  CHECK(inNew.prepare(0) == dir.path + "/made/heartbeat-0");
  REQUIRE(::symlink(dir.path.c_str(), (dir.path + "/link").c_str()) == 0);
  HeartbeatFiles throughLink(dir.path + "/link");
  CHECK_THROWS_AS(throughLink.prepare(0), std::system_error);
}

TEST_CASE(
    "heartbeat files: a restart resets the last attempt's file in place, and replaces "
    "anything else found there",
    "[progress][unit]") {
  TempDir dir;
  HeartbeatFiles files(dir.path);
  auto inode = [](const std::string& path) {
    struct stat info {};
    REQUIRE(::lstat(path.c_str(), &info) == 0);
    return info.st_ino;
  };
  const std::string path = files.prepare(0);
  const auto first = inode(path);
  REQUIRE(::utime(path.c_str(), nullptr) == 0);
  REQUIRE(files.lastReport(0).has_value());
  // Untouched but for reports: the same file, its report forgotten (no inode freed and made).
  CHECK(files.prepare(0) == path);
  CHECK(inode(path) == first);
  CHECK_FALSE(files.lastReport(0).has_value());
  // What a worker could leave there instead is never written through or kept: a link (to a
  // file of its own), a second name for the file, a file others may write to.
  const std::string target = dir.path + "/target";
  { std::ofstream(target) << "x"; }
  REQUIRE(::utime(target.c_str(), nullptr) == 0);
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink(target.c_str(), path.c_str()) == 0);
  files.prepare(0);
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  CHECK(S_ISREG(info.st_mode));
  CHECK_FALSE(files.lastReport(0).has_value());
  REQUIRE(::stat(target.c_str(), &info) == 0);
  CHECK(info.st_mtim.tv_sec != 0);  // the link's target untouched
  const std::string other = dir.path + "/other-name";
  REQUIRE(::link(path.c_str(), other.c_str()) == 0);
  const auto linked = inode(path);
  files.prepare(0);
  CHECK(inode(path) != linked);
  // (A file replaced may get the freed inode's number again: its mode tells it apart.)
  REQUIRE(::chmod(path.c_str(), 0666) == 0);
  files.prepare(0);
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
}

TEST_CASE(
    "heartbeat files made ahead: prepare() finds them reset, and what was planted there "
    "is replaced, never written through",
    "[progress][unit]") {
  TempDir dir;
  const std::string target = dir.path + "/target";
  { std::ofstream(target) << "x"; }
  REQUIRE(::utime(target.c_str(), nullptr) == 0);
  REQUIRE(::symlink(target.c_str(), (dir.path + "/heartbeat-2").c_str()) == 0);
  {
    HeartbeatFiles files(dir.path);
    files.prepareAhead(4);
    for (int rank = 0; rank < 4; ++rank) {
      const std::string path = files.prepare(rank);
      CHECK(path == fmt::format("{}/heartbeat-{}", dir.path, rank));
      struct stat info {};
      REQUIRE(::lstat(path.c_str(), &info) == 0);
      CHECK(S_ISREG(info.st_mode));
      CHECK((info.st_mode & 0777) == 0600);
      CHECK_FALSE(files.lastReport(rank).has_value());
    }
    struct stat info {};
    REQUIRE(::stat(target.c_str(), &info) == 0);
    CHECK(info.st_mtim.tv_sec != 0);  // the link's target untouched
  }
  // Made ahead and never prepared (a job that ended before its workers): joined, no error.
  {
    TempDir other;
    HeartbeatFiles files(other.path);
    files.prepareAhead(8);
  }
  // Not the agent's own directory: refused at once.
  REQUIRE(::symlink(dir.path.c_str(), (dir.path + "/link").c_str()) == 0);
  HeartbeatFiles throughLink(dir.path + "/link");
  CHECK_THROWS_AS(throughLink.prepareAhead(2), std::system_error);
}

TEST_CASE(
    "a worker that keeps reporting is never hung, and the monitor wakes about once per hang "
    "timeout whatever the rate of reports",
    "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  HangPolicy policy;
  policy.hangTimeout = 10s;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &heartbeats, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  monitor.start({100, 101});
  // 1000 reports a second for ten minutes, as the clock moves in 1 ms steps... in 100 ms steps
  // here (the fake's reports are free either way).
  for (int step = 0; step < 6000; ++step) {
    heartbeats.reports[0] = heartbeats.reports[1] = loop.wallNow();
    loop.inner.advance(100ms);
  }
  CHECK(hung.empty());
  CHECK(loop.armed <= 62);  // 600 s / 10 s, plus the first look and a margin
  // Now rank 1 stops: hung 10 s after its last report, and only it.
  for (int step = 0; step < 120; ++step) {
    heartbeats.reports[0] = loop.wallNow();
    loop.inner.advance(100ms);
  }
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].localRank == 1);
  CHECK(hung[0].kind == HangKind::kNoProgress);
  CHECK(hung[0].silentFor >= 10s);
  CHECK(hung[0].silentFor <= 11s);
}

TEST_CASE("after a first report a worker is on the hang timeout's clock, not the startup one",
          "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  HangPolicy policy;
  policy.hangTimeout = 10s;
  policy.startupTimeout = 3600s;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &heartbeats, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  monitor.start({100});
  loop.inner.advance(25s);
  heartbeats.reports[0] = loop.wallNow();  // its first report, then silence
  loop.inner.advance(9s);
  CHECK(hung.empty());
  loop.inner.advance(11s);  // within two hang timeouts of the report, far before the startup one
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].kind == HangKind::kNoProgress);
}

TEST_CASE("stop() ends the verdicts: a stopping attempt's workers are not judged",
          "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  HangPolicy policy;
  policy.exitTimeout = 5s;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &heartbeats, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  monitor.start({100, 101});
  monitor.exited(0, /*succeeded=*/true);
  monitor.stop();
  loop.inner.advance(60s);
  CHECK(hung.empty());
}

// --- the exit rule: stragglers that work are left alone, idle ones are hung ---

namespace {

struct ExitRule {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  FakeActivity activity;
  HangPolicy policy;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor;

  explicit ExitRule(std::chrono::milliseconds exitTimeout)
      : policy(withExitTimeout(exitTimeout)),
        monitor(loop, policy, &heartbeats, &activity,
                [this](const HungWorker& worker) { hung.push_back(worker); }) {}

  static HangPolicy withExitTimeout(std::chrono::milliseconds exitTimeout) {
    HangPolicy policy;
    policy.exitTimeout = exitTimeout;
    return policy;
  }
  // `pid`'s tree works at `share` of one core (and does `ioPerSecond`) for `duration`, in 100 ms
  // steps of the clock.
  void work(pid_t pid, double share, std::uint64_t ioPerSecond,
            std::chrono::milliseconds duration) {
    for (auto done = 0ms; done < duration; done += 100ms) {
      activity.cpu[pid] += std::chrono::milliseconds(static_cast<int>(100 * share));
      activity.io[pid] += ioPerSecond / 10;
      loop.inner.advance(100ms);
    }
  }
};

}  // namespace

TEST_CASE(
    "the exit rule: an idle straggler is hung at first success + E, exactly as before, and a "
    "busy one is looked at again one window later, and hung once a window finds it idle",
    "[progress][unit]") {
  ExitRule rule(10s);
  rule.monitor.start({100, 101, 102});
  rule.monitor.exited(0, /*succeeded=*/true);
  // Rank 1 is blocked for good (no CPU, no I/O); rank 2 evaluates at a quarter of a core.
  rule.work(102, 0.25, 0, 9900ms);
  CHECK(rule.hung.empty());
  rule.work(102, 0.25, 0, 100ms);
  REQUIRE(rule.hung.size() == 1);
  CHECK(rule.hung[0].localRank == 1);
  CHECK(rule.hung[0].kind == HangKind::kAtExit);
  CHECK(rule.hung[0].silentFor == 10s);
  CHECK(
      rule.hung[0].detail ==
      "still running 10.0 s after a worker of this node exited 0 and idle all that time: 0.00 s of "
      "CPU time, 0 bytes of I/O, no progress report (--exit-timeout 10)");
  // Rank 2 works on for five more seconds, then blocks: the window that saw it work spares it,
  // the next one, idle from start to end, does not.
  rule.work(102, 0.25, 0, 5s);
  rule.loop.inner.advance(5s);
  CHECK(rule.hung.size() == 1);
  rule.loop.inner.advance(10s);
  REQUIRE(rule.hung.size() == 2);
  CHECK(rule.hung[1].localRank == 2);
  CHECK(rule.hung[1].silentFor == 10s);
  CHECK(rule.hung[1].detail ==
        "still running 30.0 s after a worker of this node exited 0 and idle for the last 10.0 s: "
        "0.00 s of CPU time, 0 bytes of I/O, no progress report (--exit-timeout 10)");
  // One pass over the trees when the rule starts and one per window: 0, 10, 20, 30 s.
  CHECK(rule.activity.samples == 4);
}

TEST_CASE(
    "the exit rule's thresholds: under 1% of a core (a watchdog thread's wake-ups) is idle, and "
    "1% of a core, a page of I/O or a progress report is work",
    "[progress][unit]") {
  ExitRule rule(100s);
  rule.monitor.start({100, 101, 102, 103, 104, 105});
  rule.monitor.exited(0, /*succeeded=*/true);
  // 101: torch 2.x's NCCL watchdog in a process stuck for good, generously (0.5% of a core).
  // 102: 1% of a core. 103: 5 KiB of I/O in all, no CPU. 104: one progress report. 105: 4000
  // bytes of output, no CPU.
  for (int step = 0; step < 1000; ++step) {
    rule.activity.cpu[101] += std::chrono::milliseconds(step % 2 == 0 ? 1 : 0);
    rule.activity.cpu[102] += 1ms;
    if (step == 500) {
      rule.activity.io[103] += 5 << 10;
      rule.heartbeats.reports[4] = rule.loop.wallNow();
      rule.activity.io[105] += 4000;
    }
    rule.loop.inner.advance(100ms);
  }
  std::vector<int> ranks;
  for (const HungWorker& worker : rule.hung) ranks.push_back(worker.localRank);
  CHECK(ranks == std::vector<int>{1, 5});
}

TEST_CASE(
    "the exit rule without a way to see work (no WorkerActivity) kills what still runs at "
    "first success + E",
    "[progress][unit]") {
  CountingLoop loop;
  HangPolicy policy;
  policy.exitTimeout = 5s;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, nullptr, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  monitor.start({100, 101});
  monitor.exited(0, /*succeeded=*/true);
  loop.inner.advance(4999ms);
  CHECK(hung.empty());
  loop.inner.advance(1ms);
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].detail ==
        "still running 5.0 s after a worker of this node exited 0 (--exit-timeout 5)");
}

TEST_CASE(
    "a paused monitor (the job is stopped) judges nothing and wakes never, and resumed every rule "
    "starts afresh",
    "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  FakeActivity activity;
  HangPolicy policy;
  policy.hangTimeout = 10s;
  policy.exitTimeout = 20s;
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &heartbeats, &activity,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  monitor.start({100, 101, 102});
  heartbeats.reports[0] = heartbeats.reports[1] = loop.wallNow();  // then nothing
  monitor.exited(2, /*succeeded=*/true);  // the exit rule judges ranks 0 and 1
  loop.inner.advance(9s);
  monitor.pause();
  const int armed = loop.armed;
  loop.inner.advance(std::chrono::hours(1));
  CHECK(hung.empty());
  CHECK(loop.armed == armed);
  activity.cpu[101] += 1s;  // rank 1 works a little after the resume (its tree is sampled anew)
  monitor.resume();
  loop.inner.advance(9999ms);
  CHECK(hung.empty());
  loop.inner.advance(1ms);  // a full hang timeout since the resume
  REQUIRE(hung.size() == 2);
  CHECK(hung[0].localRank == 0);
  CHECK(hung[0].kind == HangKind::kNoProgress);
  CHECK(hung[0].detail ==
        "no progress reported for 10.0 s since the job was resumed (--hang-timeout 10)");
  CHECK(hung[1].localRank == 1);
  CHECK(hung[1].kind == HangKind::kNoProgress);

  // The startup allowance and the exit timeout start afresh too.
  CountingLoop loop2;
  HangPolicy startup;
  startup.hangTimeout = 10s;
  startup.startupTimeout = 60s;
  startup.exitTimeout = 20s;
  FakeHeartbeats none;
  std::vector<HungWorker> hung2;
  ProgressMonitor monitor2(loop2, startup, &none, &activity,
                           [&](const HungWorker& worker) { hung2.push_back(worker); });
  monitor2.start({200, 201, 202});
  monitor2.exited(0, /*succeeded=*/true);
  activity.cpu[202] = 5s;  // rank 2 works all along, so only the startup rule is left for it
  loop2.inner.advance(15s);
  monitor2.pause();
  loop2.inner.advance(std::chrono::hours(1));
  monitor2.resume();
  // Rank 2 keeps working: the exit rule never takes it.
  auto run = [&](int seconds) {
    for (int step = 0; step < seconds; ++step) {
      activity.cpu[202] += 1s;
      loop2.inner.advance(1s);
    }
  };
  run(19);
  CHECK(hung2.empty());
  run(1);
  REQUIRE(hung2.size() == 1);
  CHECK(hung2[0].localRank == 1);
  CHECK(hung2[0].kind == HangKind::kAtExit);
  CHECK(hung2[0].silentFor == 20s);
  run(39);
  CHECK(hung2.size() == 1);
  run(1);
  REQUIRE(hung2.size() == 2);
  CHECK(hung2[1].localRank == 2);
  CHECK(hung2[1].detail ==
        "no progress reported in the 60.0 s since the job was resumed "
        "(--hang-startup-timeout 60)");
}

// --- what a worker's tree has done: the samples and /proc ---

TEST_CASE(
    "work between two samples: growth of the same processes, all of a new one, nothing of "
    "one gone, and a reused pid is a new process",
    "[progress][unit]") {
  const TreeSample before{{10, {1, 500ms, 1000}}, {11, {2, 100ms, 0}}, {12, {3, 7s, 9}}};
  const TreeSample after{{10, {1, 700ms, 1500}},  // grew by 200 ms and 500 bytes
                         {11, {5, 30ms, 10}},     // pid 11 is another process now: all of it
                         {13, {6, 40ms, 20}}};    // new; 12 is gone
  const WorkDone done = workBetween(before, after);
  CHECK(done.cpu == 270ms);
  CHECK(done.ioBytes == 530);
  CHECK(workBetween(after, after).cpu == 0ms);
  CHECK(workBetween(after, TreeSample{}).ioBytes == 0);
}

TEST_CASE("/proc/<pid>/stat and /proc/<pid>/io parsed: session, CPU ticks, start time, bytes",
          "[progress][unit]") {
  const auto stat = parseProcStat(
      "4242 (a (weird) name) S 4241 4242 4240 34816 4242 4194560 1510 0 0 0 123 45 6 7 20 0 3 0 "
      "98765 12000000 900 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 1 0 0 0 0 0");
  REQUIRE(stat.has_value());
  CHECK(stat->state == 'S');
  CHECK(stat->parent == 4241);
  CHECK(stat->processGroup == 4242);
  CHECK(stat->session == 4240);
  CHECK(stat->userTicks == 123);
  CHECK(stat->systemTicks == 45);
  CHECK(stat->childUserTicks == 6);
  CHECK(stat->childSystemTicks == 7);
  CHECK(stat->startTicks == 98765);
  CHECK_FALSE(parseProcStat("4242 no parentheses").has_value());
  const auto io = parseProcIo(
      "rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n"
      "write_bytes: 8192\ncancelled_write_bytes: 0\n");
  REQUIRE(io.has_value());
  CHECK(io->readChars == 100);
  CHECK(io->writtenChars == 200);
  CHECK(io->readBytes == 4096);
  CHECK(io->writtenBytes == 8192);
  CHECK_FALSE(parseProcIo("syscr: 3\n").has_value());
  const auto self = readProcStat(::getpid());
  REQUIRE(self.has_value());
  CHECK(self->session == ::getsid(0));
}

namespace {

// A worker as the launcher starts one (a session of its own) whose child does the work when told:
// 200 ms of CPU time and 64 KiB written to /dev/null. Only async-signal-safe calls after fork().
class SessionWithBusyChild {
 public:
  SessionWithBusyChild() {
    REQUIRE(::pipe(go_) == 0);
    REQUIRE(::pipe(ready_) == 0);
    worker_ = ::fork();
    REQUIRE(worker_ >= 0);
    if (worker_ == 0) {
      ::setsid();
      if (::fork() == 0) {
        ::write(ready_[1], "r", 1);
        char c;
        ::read(go_[0], &c, 1);
        timespec start{}, now{};
        ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
        do {
          ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
        } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 <
                 200);
        static char zeros[64 << 10];
        const int null = ::open("/dev/null", O_WRONLY);
        ::write(null, zeros, sizeof zeros);
        ::write(ready_[1], "d", 1);
        for (;;) ::pause();
      }
      for (;;) ::pause();
    }
  }
  ~SessionWithBusyChild() {
    ::kill(-worker_, SIGKILL);
    ::waitpid(worker_, nullptr, 0);
    for (int fd : {go_[0], go_[1], ready_[0], ready_[1]}) ::close(fd);
  }
  pid_t pid() const { return worker_; }
  // Waits (bounded by the test's CTest timeout; the child writes at once) for the child's word.
  char next() {
    char c = 0;
    REQUIRE(::read(ready_[0], &c, 1) == 1);
    return c;
  }
  void go() { REQUIRE(::write(go_[1], "g", 1) == 1); }

 private:
  int go_[2]{-1, -1};
  int ready_[2]{-1, -1};
  pid_t worker_ = -1;
};

}  // namespace

TEST_CASE("ProcActivity: a worker's tree is its session, and the work of a child counts",
          "[progress][unit]") {
  SessionWithBusyChild worker;
  REQUIRE(worker.next() == 'r');  // its child waits to be told
  ProcActivity activity;
  const std::vector<TreeSample> before = activity.sample({worker.pid(), -1});
  REQUIRE(before.size() == 2);
  CHECK(before[0].size() == 2);  // the worker and its child; not this test, nor anything else
  CHECK(before[0].count(worker.pid()) == 1);
  CHECK(before[1].empty());
  worker.go();
  REQUIRE(worker.next() == 'd');
  const std::vector<TreeSample> after = activity.sample({worker.pid()});
  const WorkDone done = workBetween(before[0], after[0]);
  CHECK(done.cpu >= 150ms);  // 200 ms spent, in clock ticks
  CHECK(done.ioBytes >= (64u << 10));
}

TEST_CASE(
    "descendantsOf: children and grandchildren through the kernel's children lists, the "
    "job's size and not the machine's",
    "[progress][unit]") {
  int hold[2];
  REQUIRE(::pipe(hold) == 0);
  int told[2];
  REQUIRE(::pipe(told) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(hold[1]);
    ::close(told[0]);
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      char byte;
      (void)!::read(hold[0], &byte, 1);  // until the test closes its end
      ::_exit(0);
    }
    (void)!::write(told[1], &grandchild, sizeof grandchild);
    char byte;
    (void)!::read(hold[0], &byte, 1);
    ::waitpid(grandchild, nullptr, 0);
    ::_exit(0);
  }
  ::close(hold[0]);
  ::close(told[1]);
  pid_t grandchild = -1;
  REQUIRE(::read(told[0], &grandchild, sizeof grandchild) ==
          static_cast<ssize_t>(sizeof grandchild));
  const auto found = descendantsOf(::getpid());
  ::close(hold[1]);  // both end
  ::close(told[0]);
  ::waitpid(child, nullptr, 0);
  if (!found) {
    WARN("this kernel keeps no /proc/<pid>/task/<tid>/children lists");
    return;
  }
  CHECK(std::count(found->begin(), found->end(), child) == 1);
  CHECK(std::count(found->begin(), found->end(), grandchild) == 1);
  CHECK(found->size() < 64);  // ours, not every process on the machine
}

TEST_CASE(
    "start pattern: a worker with no start line by --start-timeout is hung, one with it "
    "is not",
    "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats files;
  HangPolicy policy;
  policy.startPattern = "^training started";
  policy.startTimeout = 20s;
  std::vector<std::pair<int, std::string>> failed;
  LineProgress lines(files, loop, policy, [&](int localRank, std::string detail) {
    failed.emplace_back(localRank, std::move(detail));
  });
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &lines, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  lines.prepare(0);
  lines.prepare(1);
  monitor.start({100, 101});
  loop.inner.advance(5s);
  lines.startLine(0);  // the router saw rank 0's start line
  CHECK(lines.startReport(0).has_value());
  loop.inner.advance(14s);
  CHECK(hung.empty());
  loop.inner.advance(1s);
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].localRank == 1);
  CHECK(hung[0].kind == HangKind::kNoStart);
  CHECK(hung[0].silentFor == 20s);
  CHECK_THAT(
      hung[0].detail,
      Catch::Contains("no line matching --start-pattern '^training started' in the 20.0 s") &&
          Catch::Contains("(--start-timeout 20)"));
  CHECK(loop.armed <= 3);
  // A new attempt: no start line seen yet.
  lines.prepare(0);
  CHECK_FALSE(lines.startReport(0).has_value());
}

TEST_CASE(
    "progress pattern: lines are heartbeats beside the file, a --fail-pattern line is told once",
    "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats files;
  HangPolicy policy;
  policy.hangTimeout = 10s;
  policy.progressPattern = "step";
  policy.failPattern = "loss nan";
  std::vector<std::pair<int, std::string>> failed;
  LineProgress lines(files, loop, policy, [&](int localRank, std::string detail) {
    failed.emplace_back(localRank, std::move(detail));
  });
  std::vector<HungWorker> hung;
  ProgressMonitor monitor(loop, policy, &lines, nullptr,
                          [&](const HungWorker& worker) { hung.push_back(worker); });
  CHECK(lines.prepare(0) == "/fake/heartbeats/0");  // the file is still the worker's channel
  lines.prepare(1);
  monitor.start({100, 101});
  CHECK_FALSE(lines.lastReport(0).has_value());
  // Rank 0 prints a step line every second; rank 1 touches its file once, then is silent.
  files.reports[1] = loop.wallNow();
  for (int second = 0; second < 30; ++second) {
    lines.progressLine(0);
    loop.inner.advance(1s);
  }
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].localRank == 1);
  CHECK(hung[0].kind == HangKind::kNoProgress);
  // The later of the file and the line counts.
  const auto line = *lines.lastReport(0);
  files.reports[0] = line + 5s;
  CHECK(*lines.lastReport(0) == line + 5s);
  files.reports[0] = line - 5s;
  CHECK(*lines.lastReport(0) == line);
  // A failing line: one verdict, on the loop (never inside the router's read), with the pattern
  // and the line escaped and bounded.
  lines.failLine(0, "step 7 loss nan\x1b[31m");
  lines.failLine(0, "step 8 loss nan");  // its other stream, or a later line
  CHECK(failed.empty());
  loop.inner.runPosted();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].first == 0);
  CHECK(failed[0].second ==
        "wrote a line matching --fail-pattern 'loss nan': \"step 7 loss nan\\x1b[31m\"");
  lines.failLine(1, std::string(1000, 'x') + " loss nan");
  loop.inner.runPosted();
  REQUIRE(failed.size() == 2);
  CHECK(failed[1].second.size() < 300);
  CHECK_THAT(failed[1].second, Catch::EndsWith("...\""));
  // A line of the last attempt's stream, flushed when the rank is prepared again, fails nobody:
  // the worker prepared after it is another.
  lines.prepare(2);
  lines.failLine(2, "loss nan");
  lines.prepare(2);
  loop.inner.runPosted();
  CHECK(failed.size() == 2);
}
