// The progress watch: heartbeat files as the workers use them (one os.utime per report), and the
// watch's verdicts and wake-ups on a manual clock.
#include <sys/stat.h>
#include <utime.h>

#include <chrono>
#include <vector>

#include <catch2/catch.hpp>

#include "agent_fakes.h"
#include "hang/progress_watch.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;
using namespace ddprun::test;
using namespace std::chrono_literals;

// Counts the timers armed, to see how often the watch wakes.
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
  CHECK(path == dir.path + "/3");
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

TEST_CASE("a worker that keeps reporting is never hung, and the watch wakes about once per hang "
          "timeout whatever the rate of reports",
          "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  HangPolicy policy;
  policy.hangTimeout = 10s;
  std::vector<HungWorker> hung;
  ProgressWatch watch(loop, policy, &heartbeats, [&](const HungWorker& worker) { hung.push_back(worker); });
  watch.start(2);
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
  ProgressWatch watch(loop, policy, &heartbeats, [&](const HungWorker& worker) { hung.push_back(worker); });
  watch.start(1);
  loop.inner.advance(25s);
  heartbeats.reports[0] = loop.wallNow();  // its first report, then silence
  loop.inner.advance(9s);
  CHECK(hung.empty());
  loop.inner.advance(11s);  // within two hang timeouts of the report, far before the startup one
  REQUIRE(hung.size() == 1);
  CHECK(hung[0].kind == HangKind::kNoProgress);
}

TEST_CASE("stop() ends the verdicts: a stopping attempt's workers are not judged", "[progress][unit]") {
  CountingLoop loop;
  FakeHeartbeats heartbeats;
  HangPolicy policy;
  policy.exitTimeout = 5s;
  std::vector<HungWorker> hung;
  ProgressWatch watch(loop, policy, &heartbeats, [&](const HungWorker& worker) { hung.push_back(worker); });
  watch.start(2);
  watch.exited(0, /*succeeded=*/true);
  watch.stop();
  loop.inner.advance(60s);
  CHECK(hung.empty());
}
