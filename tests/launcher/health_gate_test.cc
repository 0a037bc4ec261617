// The health gate's parts (health/, docs/health.md): the visible GPUs' list, the free-space
// check, the hooks run through /bin/sh (exit code, timeout, output prefixed in the log) and the
// real gate's verdict posted to its loop.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "agent_fakes.h"
#include "core/cuda_visible_devices.h"
#include "health/free_space.h"
#include "health/hook_runner.h"
#include "health/node_health_gate.h"
#include "log_capture.h"

namespace {

using namespace ddprun::launcher;
using namespace std::chrono_literals;

HookRun shellHook(std::string command, std::chrono::milliseconds timeout = 10s) {
  return {"--health-check", std::move(command), {"PATH=/usr/bin:/bin", "MARK=seen"}, timeout};
}

}  // namespace

TEST_CASE("visible GPUs: CUDA_VISIBLE_DEVICES read as CUDA reads it", "[health][unit]") {
  CHECK(visibleDevices(std::nullopt, 3).size() == 3);
  const auto some = visibleDevices(std::string("2, 0"), 4);
  REQUIRE(some.size() == 2);
  CHECK(some[0].index == 2);
  CHECK(some[1].index == 0);
  CHECK(visibleDevices(std::string("1,7,2"), 4).size() == 1);  // stops at the first invalid entry
  CHECK(visibleDevices(std::string("1,1"), 4).size() == 1);    // a repeated index too
  CHECK(visibleDevices(std::string(""), 4).empty());
  CHECK(visibleDevices(std::string("0"), 0).empty());
  const auto uuid = visibleDevices(std::string("GPU-abc,0"), 2);
  REQUIRE(uuid.size() == 2);
  CHECK(uuid[0].index == -1);
  CHECK(uuid[0].uuid == "GPU-abc");
  CHECK(visibleDevices(std::string("GPU-a,GPU-b"), 1).size() == 1);  // never more than there are
}

TEST_CASE("free space: a place under the floor fails, naming it, and a missing place is skipped",
          "[health][unit]") {
  const std::vector<FreeSpacePlace> places{{"TMPDIR", "/tmp"}, {"nowhere", "/no/such/dir"}};
  CHECK_FALSE(checkFreeSpace(places, 1));
  CHECK_FALSE(checkFreeSpace(places, 0));  // 0: not checked
  const auto full = checkFreeSpace(places, std::uint64_t{1} << 62);
  REQUIRE(full);
  CHECK_FALSE(full->passed);
  CHECK(full->check == "free space");
  CHECK_THAT(full->reason,
             Catch::Contains("TMPDIR (/tmp) has") && Catch::Contains("--health-min-free-mb"));
  const auto listed = freeSpacePlaces("/logs", "");
  REQUIRE(listed.size() == 3);
  CHECK(listed[1].path == "/tmp");
}

TEST_CASE("a hook's exit code, its output in the log with its prefix, its timeout",
          "[health][unit]") {
  std::atomic<bool> cancelled{false};
  ddprun::test::LogCapture log;
  const HookOutcome failed =
      runHook(shellHook("echo \"out $MARK\"; echo err >&2; exit 3"), cancelled);
  CHECK(failed.kind == HookOutcome::Kind::kExited);
  CHECK(failed.code == 3);
  CHECK_FALSE(failed.passed());
  CHECK(failed.text(10s) == "exited with 3");
  CHECK_THAT(log.text(), Catch::Contains("[--health-check] out seen") &&
                             Catch::Contains("[--health-check] err") &&
                             !Catch::Contains("ddprun-hook-exit"));
  CHECK(runHook(shellHook("true"), cancelled).passed());
  CHECK(runHook(shellHook("printf 'no newline'"), cancelled).passed());
  CHECK_THAT(log.text(), Catch::Contains("[--health-check] no newline"));
  // Killed by a signal: the shell's 128 + N.
  CHECK(runHook(shellHook("kill -9 $$"), cancelled).code == 137);
  // A background process that keeps the output open does not hold the verdict back.
  const auto started = std::chrono::steady_clock::now();
  CHECK(runHook(shellHook("sleep 30 & exit 0"), cancelled).passed());
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  const HookOutcome slow = runHook(shellHook("sleep 30", 300ms), cancelled);
  CHECK(slow.kind == HookOutcome::Kind::kTimedOut);
  CHECK_THAT(slow.text(300ms), Catch::Contains("ran past its 0.3 s timeout"));
}

TEST_CASE("the node's gate posts its verdict to the loop: the first failing step names itself",
          "[health][unit]") {
  ddprun::test::ManualEventLoop loop;
  HealthPolicy policy;
  policy.checkCommand = "exit 0";
  policy.preRoundCommand = "exit 5";
  NodeHealthGate gate(policy, NodeHealthFacts{}, loop, "libno-such-nvml.so.1");
  std::optional<HealthVerdict> verdict;
  gate.check(-1, [&](HealthVerdict said) { verdict = std::move(said); });
  REQUIRE(loop.runUntil([&] { return verdict.has_value(); }, 10s));
  CHECK_FALSE(verdict->passed);
  CHECK(verdict->check == "--pre-round-hook");
  CHECK(verdict->reason == "exited with 5");
  bool after = false;
  gate.afterRound(0, [&] { after = true; });  // no post-round hook: at once
  CHECK(after);
}
