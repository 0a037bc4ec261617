// Store::takeTicket / ticketCount through the seam, in-process: the default form is c10d's
// counter (add(key, 1) / add(key, 0)), and a wrapper store forwards both calls to the store it
// wraps, so that a backend's own form (EtcdStore's put version, tested on a real etcd in
// etcd_store_test) is not lost behind a PrefixStore. Unit tests: milliseconds, no I/O.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/prefix_store.h"

using namespace ddprun::rendezvous;

namespace {

// A store whose tickets are its own (not its add's): what a backend that overrides them looks
// like to a wrapper. It records every call, so a wrapper that turned a ticket into add() shows.
class OwnTickets final : public Store {
 public:
  void set(std::string_view, std::string_view) override {}
  std::string get(std::string_view) override { return {}; }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    calls.push_back("add " + std::string(key) + " " + std::to_string(delta));
    return -1;
  }
  std::int64_t takeTicket(std::string_view key) override {
    calls.push_back("takeTicket " + std::string(key));
    return 1000 + static_cast<std::int64_t>(calls.size());
  }
  std::int64_t ticketCount(std::string_view key) override {
    calls.push_back("ticketCount " + std::string(key));
    return 77;
  }
  std::string compareSet(std::string_view, std::string_view, std::string_view) override {
    return {};
  }
  void wait(const std::vector<std::string>&, Duration) override {}
  using Store::wait;
  bool check(const std::vector<std::string>&) override { return true; }
  bool deleteKey(std::string_view) override { return false; }
  std::int64_t numKeys() override { return 0; }

  std::vector<std::string> calls;
};

}  // namespace

TEST_CASE("the default ticket is c10d's counter: 1, 2, 3 ..., its count a read", "[ticket][unit]") {
  HashStore store;
  CHECK(store.ticketCount("t") == 0);
  CHECK(store.takeTicket("t") == 1);
  CHECK(store.takeTicket("t") == 2);
  CHECK(store.takeTicket("t") == 3);
  CHECK(store.ticketCount("t") == 3);
  // The same counter add() sees: a c10d client (or an older agent) counting the same key agrees.
  CHECK(store.get("t") == "3");
  CHECK(store.add("t", 1) == 4);
  CHECK(store.takeTicket("t") == 5);
  // A deleted key starts again at 1.
  CHECK(store.deleteKey("t"));
  CHECK(store.takeTicket("t") == 1);
}

TEST_CASE("concurrent takers of the default ticket each get a number of their own, none skipped",
          "[ticket][unit]") {
  HashStore store;
  constexpr int kTakers = 16;
  std::vector<std::int64_t> taken(kTakers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kTakers; ++i) {
    threads.emplace_back([&, i] {
      auto connection = store.connect();
      taken[static_cast<std::size_t>(i)] = connection->takeTicket("join");
    });
  }
  for (auto& thread : threads) thread.join();
  std::sort(taken.begin(), taken.end());
  std::vector<std::int64_t> expected(kTakers);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(taken == expected);
  CHECK(store.ticketCount("join") == kTakers);
}

TEST_CASE("a PrefixStore forwards tickets to the wrapped store's own form, under its prefix",
          "[ticket][unit]") {
  auto base = std::make_shared<OwnTickets>();
  PrefixStore prefixed(base, "job/3");
  CHECK(prefixed.takeTicket("next_node_id") == 1001);
  CHECK(prefixed.ticketCount("round/0/joined") == 77);
  // Nested, as the agent's per-generation stores are.
  PrefixStore nested(std::make_shared<PrefixStore>(base, "job/3"), "gen/1");
  CHECK(nested.takeTicket("k") == 1003);
  CHECK(base->calls == std::vector<std::string>{"takeTicket job/3/next_node_id",
                                                "ticketCount job/3/round/0/joined",
                                                "takeTicket job/3/gen/1/k"});
}

TEST_CASE("a PrefixStore over the default form counts in the wrapped store's counter",
          "[ticket][unit]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore prefixed(base, "job");
  CHECK(prefixed.takeTicket("t") == 1);
  CHECK(prefixed.takeTicket("t") == 2);
  CHECK(base->ticketCount("job/t") == 2);
  CHECK(base->get("job/t") == "2");
}
