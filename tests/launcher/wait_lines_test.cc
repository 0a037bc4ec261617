// "Waiting says what it waits for" (#21 points 2 and 5), through the seams: a manual clock, the
// in-process store, and a store backend whose host name resolves late. What the lines say comes
// from the store's records (the joined nodes' host names, the members without a finished mark),
// and when they come is core/wait_lines.h's rule: nothing in the first second, then one line at
// once on a change and otherwise one per kWaitLineInterval.
#include "core/wait_lines.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/hash_store.h"
#include "log_capture.h"
#include "membership/membership.h"
#include "stores/store_backend.h"

namespace {

using namespace ddprun::launcher;
using ddprun::rendezvous::HashStore;
using ddprun::test::LogCapture;
using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

// A clock the test moves; the store's holds age on it too.
struct ManualClock {
  std::atomic<std::int64_t> ms{1'000'000};
  Membership::Now now() {
    return [this] { return TimePoint(std::chrono::milliseconds(ms.load())); };
  }
  void advance(std::chrono::milliseconds by) { ms += by.count(); }
};

int count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// Waits (real time, bounded) until the log holds `n` matches of `pattern`.
bool logged(const LogCapture& log, const std::string& pattern, int n = 1) {
  for (int i = 0; i < 400; ++i) {
    if (count(log.text(), pattern) >= n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

NodeInfo node(const std::string& address, const std::string& hostname) {
  NodeInfo self;
  self.address = address;
  self.hostname = hostname;
  self.nproc = 1;
  self.pid = 1000;
  return self;
}

// A c10d job of `nodes` nodes whose liveness holds never lapse while the test moves the clock.
RendezvousConfig jobOf(int nodes) {
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.minNodes = nodes;
  config.maxNodes = nodes;
  config.runId = "wait";
  config.settings.keepAliveInterval = std::chrono::hours(1);
  return config;
}

// Joins and, as group rank 0, publishes the workers' store the others wait for.
Round joinAndPublish(Membership& member) {
  Round round = member.join(-1);
  if (round.hostsWorkerStore) member.publishWorkerStore(round.number, member.self().address, 29512);
  return round;
}

// The store at "late-master.svc:29400", whose name resolves once the clock reaches `resolvesAt`
// and which answers from `answersAt` on; each failed attempt takes a second, as a real one does.
class LateBackend final : public StoreBackend {
 public:
  LateBackend(HashStore& store, ManualClock& clock, std::int64_t resolvesAt, std::int64_t answersAt)
      : inner_(store), clock_(clock), resolvesAt_(resolvesAt), answersAt_(answersAt) {}
  std::unique_ptr<ddprun::rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) override {
    if (clock_.ms < resolvesAt_) {
      clock_.advance(1s);
      throw ddprun::rendezvous::StoreUnresolvedError(
          "late-master.svc:29400: cannot resolve host 'late-master.svc': Name or service not "
          "known");
    }
    if (clock_.ms < answersAt_) {
      clock_.advance(1s);
      throw ddprun::rendezvous::StoreConnectionError("late-master.svc:29400: Connection refused");
    }
    return inner_.connect(callTimeout, connectTimeout);
  }
  std::string address() const override { return "late-master.svc:29400"; }
  std::string addressTowardStore() const override { return "10.9.9.9"; }
  StoreTenancy tenancy() const override { return StoreTenancy::kOneJob; }

 private:
  InProcessStoreBackend inner_;
  ManualClock& clock_;
  std::int64_t resolvesAt_;
  std::int64_t answersAt_;
};

}  // namespace

TEST_CASE("wait lines: quiet for the first second, at once on a change, else one per 10 s",
          "[wait_lines]") {
  const TimePoint start{std::chrono::seconds(100)};
  WaitLines lines(start);
  CHECK_FALSE(lines.due(start, "1 joined"));
  CHECK_FALSE(lines.due(start + 999ms, "2 joined"));  // a wait this short says nothing
  CHECK(lines.due(start + 1s, "2 joined"));
  CHECK_FALSE(lines.due(start + 2s, "2 joined"));
  CHECK(lines.due(start + 3s, "3 joined"));      // a node joined: at once
  CHECK(lines.due(start + 3500ms, "2 joined"));  // and one left: at once
  CHECK_FALSE(lines.due(start + 13s, "2 joined"));
  CHECK(lines.due(start + 13500ms, "2 joined"));  // kWaitLineInterval after the last line
  STATIC_REQUIRE(kWaitLineInterval == std::chrono::seconds(10));
}

TEST_CASE("wait lines: what they say", "[wait_lines]") {
  CHECK(joinWaitLine(0, 2, 2, 1, {"host-a"}, 590s, false) ==
        "waiting for 1 more node (1 of 2 joined: host-a), 590 s left of the join timeout");
  CHECK(joinWaitLine(3, 3, 5, 2, {"a", "b"}, 12'400ms, false) ==
        "waiting for 1 more node (2 of at least 3 joined: a, b), 12 s left of the join timeout");
  CHECK(joinWaitLine(0, 4, 4, 1, {"a"}, 5s, false) ==
        "waiting for 3 more nodes (1 of 4 joined: a), 5 s left of the join timeout");
  CHECK(joinWaitLine(1, 2, 4, 2, {"a", "b"}, 25s, true) ==
        "rendezvous round 1: 2 of at most 4 nodes joined (a, b); waiting 25 s more "
        "(last_call_timeout) for others before it closes");
  // A job of thousands counts its joiners and names none.
  CHECK(
      joinWaitLine(0, 4000, 4096, 3512, {}, 590s, false) ==
      "waiting for 488 more nodes (3512 of at least 4000 joined), 590 s left of the join timeout");
  CHECK(joinWaitLine(2, 4000, 4096, 4001, {}, 25s, true) ==
        "rendezvous round 2: 4001 of at most 4096 nodes joined; waiting 25 s more "
        "(last_call_timeout) for others before it closes");
  CHECK(barrierWaitLine({{1, "host-b"}}, 280s) ==
        "waiting for node host-b (group rank 1) to finish, 280 s left");
  CHECK(barrierWaitLine({{1, "b"}, {3, "d"}}, -2s) ==
        "waiting for nodes b (group rank 1), d (group rank 3) to finish, the exit barrier's "
        "timeout has passed");
}

TEST_CASE(
    "while a round forms: a line when a node joins, one per 10 s otherwise, names from "
    "the store's records",
    "[wait_lines][membership]") {
  LogCapture log;
  ManualClock clock;
  HashStore store(clock.now());
  InProcessStoreBackend backendA(store);
  InProcessStoreBackend backendB(store);
  InProcessStoreBackend backendC(store);
  const RendezvousConfig config = jobOf(3);
  Membership a(config, backendA, node("10.0.0.1", "host-a"), clock.now());
  Membership b(config, backendB, node("10.0.0.2", "host-b"), clock.now());
  Membership c(config, backendC, node("10.0.0.3", "host-c"), clock.now());
  a.open();
  b.open();
  c.open();
  std::string errorA;
  std::string errorB;
  const auto joinIn = [](Membership& member, std::string& error) {
    try {
      joinAndPublish(member);
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  std::thread joinA([&] { joinIn(a, errorA); });
  clock.advance(500ms);
  std::this_thread::sleep_for(200ms);
  CHECK(count(log.text(), "more node") == 0);  // the first second says nothing
  clock.advance(1500ms);
  REQUIRE(logged(
      log,
      R"(waiting for 2 more nodes \(1 of 3 joined: host-a\), 598 s left of the join timeout)"));
  clock.advance(3s);
  std::this_thread::sleep_for(200ms);
  CHECK(count(log.text(), "more node") == 1);  // no news, within 10 s: nothing
  // A node joins: a line at once, naming both.
  std::thread joinB([&] { joinIn(b, errorB); });
  CHECK(logged(log, R"(waiting for 1 more node \(2 of 3 joined: host-a, host-b\), 595 s left)"));
  clock.advance(10s);
  CHECK(logged(log, R"(waiting for 1 more node \(2 of 3 joined: host-a, host-b\), 585 s left)"));
  // The third closes the round; nobody waits any more.
  const Round round = joinAndPublish(c);
  joinA.join();
  joinB.join();
  CHECK(errorA.empty());
  CHECK(errorB.empty());
  CHECK(round.nodes == 3);
  INFO(log.text());
  CHECK(count(log.text(), "host-c") == 0);
  a.close(false);
  b.close(false);
  c.close(false);
}

TEST_CASE("the exit barrier names the members still at work and the time left",
          "[wait_lines][membership]") {
  LogCapture log;
  ManualClock clock;
  HashStore store(clock.now());
  InProcessStoreBackend backendA(store);
  InProcessStoreBackend backendB(store);
  RendezvousConfig config = jobOf(2);
  config.settings.exitBarrierTimeout = 300s;
  Membership a(config, backendA, node("10.0.0.1", "host-a"), clock.now());
  Membership b(config, backendB, node("10.0.0.2", "host-b"), clock.now());
  a.open();
  b.open();
  Round roundA;
  std::thread joinA([&] { roundA = joinAndPublish(a); });
  const Round roundB = joinAndPublish(b);
  joinA.join();
  REQUIRE(roundA.groupRank == 0);  // by address: host-a
  a.markDone(roundA.number, 2);
  std::optional<StopReason> stop;
  std::thread watchA([&] { stop = a.waitForStop(roundA.number); });
  clock.advance(2s);
  REQUIRE(logged(log, R"(waiting for node host-b \(group rank 1\) to finish, 298 s left)"));
  CHECK(count(log.text(), "host-a \\(group rank") == 0);
  clock.advance(10s);
  CHECK(logged(log, R"(waiting for node host-b \(group rank 1\) to finish, 288 s left)"));
  b.markDone(roundB.number, 2);
  watchA.join();
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kDone);
  a.close(false);
  b.close(false);
}

TEST_CASE(
    "in a job of more than 64 nodes the exit barrier's line reads the member list when it is "
    "due, and names those at work",
    "[wait_lines][membership][seat]") {
  // A big job's member knows its seat, not the list: the first line due (every 10 s there) reads
  // the round's world once and names the members still at work.
  LogCapture log;
  ManualClock clock;
  HashStore store(clock.now());
  constexpr int kNodes = 65;
  RendezvousConfig config = jobOf(kNodes);
  config.settings.exitBarrierTimeout = 300s;
  std::vector<std::unique_ptr<InProcessStoreBackend>> backends;
  std::vector<std::unique_ptr<Membership>> members;
  for (int i = 0; i < kNodes; ++i) {
    backends.push_back(std::make_unique<InProcessStoreBackend>(store));
    members.push_back(std::make_unique<Membership>(
        config, *backends.back(),
        node(fmt::format("10.0.0.{}", 100 + i), fmt::format("big-{}", 100 + i)), clock.now()));
    members.back()->open();
  }
  std::vector<Round> rounds(kNodes);
  std::vector<std::thread> joining;
  for (int i = 0; i < kNodes; ++i)
    joining.emplace_back([&, i] { rounds[i] = joinAndPublish(*members[i]); });
  for (auto& thread : joining) thread.join();
  // Everyone but the last two finishes (by address, they are group ranks 63 and 64).
  for (int i = 0; i < kNodes - 2; ++i) members[i]->markDone(rounds[i].number, kNodes);
  REQUIRE(rounds[kNodes - 1].groupRank == kNodes - 1);
  std::optional<StopReason> stop;
  std::thread watch([&] { stop = members[0]->waitForStop(rounds[0].number); });
  clock.advance(11s);
  CHECK(logged(
      log,
      R"(waiting for nodes big-163 \(group rank 63\), big-164 \(group rank 64\) to finish, 289 s left)"));
  for (int i = kNodes - 2; i < kNodes; ++i) members[i]->markDone(rounds[i].number, kNodes);
  watch.join();
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kDone);
  std::vector<std::thread> closing;
  for (auto& member : members) closing.emplace_back([&member] { member->close(false); });
  for (auto& thread : closing) thread.join();
}

TEST_CASE("a store host name that resolves late is waited for up to the join timeout, saying so",
          "[wait_lines][membership][late_dns]") {
  LogCapture log;
  ManualClock clock;
  HashStore store(clock.now());
  const std::int64_t start = clock.ms;
  RendezvousConfig config = jobOf(1);
  config.settings.readTimeout = 5s;  // far less than the 35 s the name takes
  LateBackend backend(store, clock, start + 35'000, start + 38'000);
  Membership member(config, backend, node("", "pod-1"), clock.now());
  member.open();
  const std::string text = log.text();
  INFO(text);
  // One line per 10 s while the name does not resolve, then why it still waits.
  CHECK(
      count(
          text,
          R"(waiting for the rendezvous store at late-master\.svc:29400: name not resolved yet \(\d+ s of 600 s\))") ==
      4);
  CHECK(count(text,
              "waiting for the rendezvous store at late-master.svc:29400: no answer yet \\(0 s of "
              "5 s\\)") == 1);
  // Its address toward the store, which could not be worked out before the name resolved.
  CHECK(member.self().address == "10.9.9.9");
  member.close(false);
}

TEST_CASE("a store host name that never resolves ends the wait at the join timeout, one line",
          "[wait_lines][membership][late_dns]") {
  LogCapture log;
  ManualClock clock;
  HashStore store(clock.now());
  RendezvousConfig config = jobOf(1);
  config.settings.joinTimeout = 20s;
  config.settings.readTimeout = 5s;
  LateBackend backend(store, clock, INT64_MAX, INT64_MAX);
  Membership member(config, backend, node("", "pod-1"), clock.now());
  try {
    member.open();
    FAIL("open() returned");
  } catch (const EndpointError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK_THAT(message, Catch::Contains("host name in late-master.svc:29400 did not resolve within "
                                        "the join timeout (20 s)") &&
                            Catch::Contains("check the name"));
  }
  CHECK(count(log.text(), "name not resolved yet") == 2);  // at 1 s and 11 s
}
