// KvState: the store's semantics without any I/O.
#include "kv_state.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>

using ddprun::rendezvous::KvObserver;
using ddprun::rendezvous::KvState;
using ddprun::rendezvous::parseCounter;
using ddprun::rendezvous::ValueRef;
using ddprun::rendezvous::protocol::WatchEvent;

namespace {

struct Recorder final : KvObserver {
  std::vector<std::uint64_t> done;
  std::vector<std::string> events;
  void onWaitDone(std::uint64_t id) override { done.push_back(id); }
  void onWatchEvent(WatchEvent event, std::string_view key, const ValueRef& oldValue,
                    const ValueRef& newValue) override {
    const auto text = [](const ValueRef& value) { return value ? value->bytes : std::string(); };
    events.push_back(std::to_string(static_cast<int>(event)) + ":" + std::string(key) + ":" +
                     text(oldValue) + ">" + text(newValue));
  }
};

}  // namespace

TEST_CASE("counters parse like std::stoll", "[kv]") {
  CHECK(parseCounter("12") == 12);
  CHECK(parseCounter(" 12abc") == 12);
  CHECK(parseCounter("-7") == -7);
  CHECK(parseCounter("+7") == 7);
  CHECK_FALSE(parseCounter("abc"));
  CHECK_FALSE(parseCounter(""));
  CHECK_FALSE(parseCounter("99999999999999999999"));
}

TEST_CASE("add wraps around int64 and refuses non-integers without changing them", "[kv]") {
  KvState kv;
  kv.set("max", "9223372036854775807");
  CHECK(kv.add("max", 1) == std::numeric_limits<std::int64_t>::min());
  kv.set("text", "abc");
  CHECK_FALSE(kv.add("text", 1));
  CHECK(*kv.find("text") == "abc");
}

TEST_CASE("a wait counts the keys missing when it starts", "[kv]") {
  KvState kv;
  Recorder r;
  kv.set("have", "1");
  CHECK(kv.wait(&r, 1, {"have"}));
  CHECK_FALSE(kv.wait(&r, 2, {"have", "a", "b"}));
  kv.set("a", "1");
  CHECK(r.done.empty());
  kv.erase("a");  // appeared once: still counts
  kv.append("b", "x");
  CHECK(r.done == std::vector<std::uint64_t>{2});
  CHECK_FALSE(kv.hasWaits(&r));
}

TEST_CASE("the same missing key twice in one wait needs one appearance", "[kv]") {
  KvState kv;
  Recorder r;
  CHECK_FALSE(kv.wait(&r, 7, {"k", "k"}));
  kv.set("k", "v");
  CHECK(r.done == std::vector<std::uint64_t>{7});
}

TEST_CASE("cancelWaits and forget drop every registration of an observer", "[kv]") {
  KvState kv;
  Recorder a;
  Recorder b;
  CHECK_FALSE(kv.wait(&a, 1, {"x"}));
  CHECK_FALSE(kv.wait(&a, 2, {"y"}));
  CHECK_FALSE(kv.wait(&b, 3, {"x"}));
  CHECK(kv.barrier(&a, 4, "bar", 2) == false);
  CHECK(kv.cancelWaits(&a) == 3);
  kv.set("x", "1");
  kv.set("y", "1");
  CHECK(a.done.empty());
  CHECK(b.done == std::vector<std::uint64_t>{3});
  kv.watch(&b, "w");
  kv.forget(&b);
  kv.set("w", "1");
  CHECK(b.events.empty());
}

TEST_CASE("a queue push wakes only the first waiter and pops are FIFO", "[kv]") {
  KvState kv;
  Recorder a;
  Recorder b;
  CHECK_FALSE(kv.wait(&a, 1, {"q"}));
  CHECK_FALSE(kv.wait(&b, 2, {"q"}));
  kv.queuePush("q", "first");
  CHECK(a.done.size() == 1);
  CHECK(b.done.empty());
  kv.queuePush("q", "second");
  CHECK(b.done.size() == 1);
  std::int64_t length = 0;
  CHECK(kv.queuePop("q", length) == "first");
  CHECK(length == 2);
  CHECK(kv.queueLength("q") == 1);
  CHECK(kv.numKeys() == 0);
}

TEST_CASE("barrier releases members whose world size is reached", "[kv]") {
  KvState kv;
  Recorder a;
  Recorder b;
  Recorder c;
  CHECK(kv.barrier(&a, 1, "bar", 3) == false);
  CHECK(kv.barrier(&b, 2, "bar", 3) == false);
  CHECK(kv.barrier(&c, 3, "bar", 3) == true);
  CHECK(a.done == std::vector<std::uint64_t>{1});
  CHECK(b.done == std::vector<std::uint64_t>{2});
  CHECK(*kv.find("bar") == "3");
  CHECK_FALSE(kv.hasWaits(&a));
}

TEST_CASE("watchers see created, updated and deleted with old and new values", "[kv]") {
  KvState kv;
  Recorder w;
  kv.watch(&w, "k");
  kv.set("k", "v1");
  kv.set("k", "v2");
  kv.erase("k");
  kv.add("k", 5);
  CHECK(kv.compareSet("k", "5", "6") == "6");
  CHECK(kv.compareSet("k", "nope", "7") == "6");
  kv.set("other", "x");
  CHECK(w.events ==
        std::vector<std::string>{"1:k:>v1", "0:k:v1>v2", "2:k:v2>", "1:k:>5", "0:k:5>6"});
}

TEST_CASE("a watcher that goes away while being notified does not disturb the others", "[kv]") {
  // What a server session does when writing the event fails: it closes and forget()s itself.
  struct Leaving final : KvObserver {
    explicit Leaving(KvState& state) : kv(state) {}
    void onWaitDone(std::uint64_t) override {}
    void onWatchEvent(WatchEvent, std::string_view, const ValueRef&, const ValueRef&) override {
      ++events;
      kv.forget(this);
    }
    KvState& kv;
    int events = 0;
  };
  KvState kv;
  Leaving leaving(kv);
  Recorder second;
  Recorder third;
  kv.watch(&leaving, "k");
  kv.watch(&second, "k");
  kv.watch(&third, "k");
  kv.set("k", "v1");
  kv.set("k", "v2");
  CHECK(leaving.events == 1);
  CHECK(second.events == std::vector<std::string>{"1:k:>v1", "0:k:v1>v2"});
  CHECK(third.events == std::vector<std::string>{"1:k:>v1", "0:k:v1>v2"});
  // The only watcher leaving erases the very list being notified.
  Leaving alone(kv);
  kv.watch(&alone, "solo");
  kv.set("solo", "x");
  kv.erase("solo");
  CHECK(alone.events == 1);
}

TEST_CASE("a held key lives while someone holds it and a holder lost for cause reports it",
          "[kv][hold]") {
  using namespace std::chrono_literals;
  KvState kv;
  Recorder a;
  Recorder b;
  Recorder waiter;
  const auto t0 = KvState::TimePoint{} + 1h;
  CHECK(kv.hold(&a, "alive/1", "node-1", 0ms, "stop", "lost node-1", t0) == "node-1");
  CHECK(*kv.find("alive/1") == "node-1");
  // Someone else cannot take it with another value; the same value adds a holder.
  CHECK(kv.hold(&b, "alive/1", "intruder", 0ms, "", "", t0) == "node-1");
  CHECK(kv.hold(&b, "alive/1", "node-1", 0ms, "", "", t0) == "node-1");
  CHECK_FALSE(kv.wait(&waiter, 9, {"stop"}));
  kv.forget(&a);  // a's connection closed: it reports, the key stays (b still holds it)
  CHECK(*kv.find("stop") == "lost node-1");
  CHECK(waiter.done == std::vector<std::uint64_t>{9});
  CHECK(kv.find("alive/1") != nullptr);
  CHECK(kv.release(&b, "alive/1"));  // quietly: no report, and the key goes with its last holder
  CHECK(kv.find("alive/1") == nullptr);
  CHECK_FALSE(kv.release(&b, "alive/1"));
}

TEST_CASE("time the server could not run is added to every hold's time-to-live", "[kv][hold]") {
  using namespace std::chrono_literals;
  KvState kv;
  Recorder a;
  Recorder b;
  const auto t0 = KvState::TimePoint{} + 1h;
  kv.hold(&a, "alive/1", "n1", 1000ms, "stop", "lost n1", t0);
  kv.hold(&b, "alive/2", "n2", 0ms, "stop", "lost n2", t0);  // no time-to-live: stays so
  kv.postponeHolds(60s);                                     // the server was stopped for a minute
  kv.expireHolds(t0 + 60s);
  CHECK(kv.find("alive/1") != nullptr);
  CHECK(kv.find("stop") == nullptr);
  kv.expireHolds(t0 + 61s);
  CHECK(kv.find("alive/1") == nullptr);
  CHECK(*kv.find("stop") == "lost n1");
  CHECK(kv.find("alive/2") != nullptr);
}

TEST_CASE("a hold that is not renewed within its time-to-live lapses", "[kv][hold]") {
  using namespace std::chrono_literals;
  KvState kv;
  Recorder a;
  const auto t0 = KvState::TimePoint{} + 1h;
  kv.hold(&a, "alive/2", "n2", 1000ms, "round/3/stop", "lost n2", t0);
  kv.expireHolds(t0 + 900ms);
  CHECK(kv.find("alive/2") != nullptr);
  kv.hold(&a, "alive/2", "n2", 1000ms, "round/4/stop", "lost n2 in round 4", t0 + 900ms);  // renew
  kv.expireHolds(t0 + 1800ms);
  CHECK(kv.find("alive/2") != nullptr);
  kv.expireHolds(t0 + 1901ms);
  CHECK(kv.find("alive/2") == nullptr);
  CHECK(kv.find("round/3/stop") == nullptr);
  CHECK(*kv.find("round/4/stop") == "lost n2 in round 4");
  CHECK_FALSE(kv.hasHolds());
}

TEST_CASE("the first report wins the notify key", "[kv][hold]") {
  using namespace std::chrono_literals;
  KvState kv;
  Recorder a;
  Recorder b;
  const auto t0 = KvState::TimePoint{} + 1h;
  kv.hold(&a, "alive/a", "a", 0ms, "stop", "lost a", t0);
  kv.hold(&b, "alive/b", "b", 0ms, "stop", "lost b", t0);
  kv.forget(&b);
  kv.forget(&a);
  CHECK(*kv.find("stop") == "lost b");
}

TEST_CASE("parked waits, barriers and watches count in storedBytes until they end",
          "[kv][budget]") {
  KvState kv;
  Recorder a;
  Recorder b;
  const auto reg = [](std::string_view key) { return KvState::registrationBytes(key); };
  kv.set("present", "v");
  const std::size_t base = kv.storedBytes();
  // Only the missing keys are parked.
  CHECK_FALSE(kv.wait(&a, 1, {"present", "missing-1", "missing-22"}));
  CHECK(kv.storedBytes() == base + reg("missing-1") + reg("missing-22"));
  CHECK_FALSE(kv.wait(&b, 1, {"never"}));
  kv.watch(&b, "watched");
  const std::size_t parked = kv.storedBytes();
  // Woken: the whole wait's registration goes when its last key appears.
  const std::size_t entry = kv.growthOfSet("missing-1", 1);
  kv.set("missing-1", "x");
  CHECK(kv.storedBytes() == parked + entry);  // the key is stored; the wait is still parked
  kv.set("missing-22", "x");
  CHECK(a.done == std::vector<std::uint64_t>{1});
  // Cancelled and forgotten: b's wait and watch go.
  kv.cancelWaits(&b);
  kv.forget(&b);
  CHECK(kv.erase("missing-1"));
  CHECK(kv.erase("missing-22"));
  CHECK(kv.storedBytes() == base);
  // A parked barrier member counts until released.
  const std::size_t counter = kv.growthOfSet("gate", 1);  // "1", then "2": one byte either way
  CHECK(kv.barrier(&a, 2, "gate", 2) == false);
  CHECK(kv.storedBytes() == base + counter + reg("gate"));
  CHECK(kv.barrier(&b, 2, "gate", 2) == true);
  CHECK(kv.storedBytes() == base + counter);
}

TEST_CASE("storedBytes counts every entry with its overhead and returns to zero", "[kv][budget]") {
  KvState kv;
  Recorder holder;
  constexpr std::size_t kEntry = KvState::kEntryOverhead;
  constexpr std::size_t kItem = KvState::kQueueItemOverhead;
  CHECK(kv.storedBytes() == 0);
  // Each write grows the count by exactly what growthOf... predicted.
  const auto expectGrowth = [&kv](std::size_t predicted, const auto& write) {
    const std::size_t before = kv.storedBytes();
    write();
    CHECK(kv.storedBytes() - before == predicted);
  };
  expectGrowth(kv.growthOfSet("key", 5), [&] { kv.set("key", "value"); });
  CHECK(kv.storedBytes() == 3 + 5 + kEntry);
  expectGrowth(kv.growthOfSet("key", 8), [&] { kv.set("key", "longer!!"); });
  kv.set("key", "v");  // shrinking
  CHECK(kv.storedBytes() == 3 + 1 + kEntry);
  expectGrowth(kv.growthOfSet("n", KvState::kMaxCounterBytes) - (KvState::kMaxCounterBytes - 1),
               [&] { kv.add("n", 5); });
  kv.add("n", -1000);  // "-995": three bytes more
  CHECK(kv.storedBytes() == (3 + 1 + kEntry) + (1 + 4 + kEntry));
  kv.append("key", "abc");
  CHECK(kv.storedBytes() == (3 + 4 + kEntry) + (1 + 4 + kEntry));
  expectGrowth(kv.growthOfPush("q", 4), [&] { kv.queuePush("q", "item"); });
  expectGrowth(kv.growthOfPush("q", 2), [&] { kv.queuePush("q", "it"); });
  CHECK(kv.growthOfPush("q", 2) == 2 + kItem);
  expectGrowth(kv.growthOfHold(&holder, "held", "h", "dead", "yes"),
               [&] { kv.hold(&holder, "held", "h", {}, "dead", "yes", {}); });
  CHECK(kv.growthOfHold(&holder, "held", "h", "dead", "yes") == 0);      // a renewal adds nothing
  CHECK(kv.growthOfHold(&holder, "held", "other", "dead", "yes") == 0);  // refused: nothing
  // Gone again: erased, popped, and the holder lost for cause, whose report is data (then erased).
  CHECK(kv.erase("key"));
  CHECK(kv.erase("n"));
  std::int64_t length = 0;
  kv.queuePop("q", length);
  kv.queuePop("q", length);
  const std::size_t beforeForget = kv.storedBytes();
  kv.forget(&holder);
  // The hold and its key go; the report takes what the holder had reserved for it.
  CHECK(kv.storedBytes() == beforeForget - 2 * (4 + 1 + kEntry));
  CHECK(kv.find("dead") != nullptr);
  CHECK(kv.erase("dead"));
  CHECK(kv.storedBytes() == 0);
}

TEST_CASE("a key listing is a snapshot of its moment whatever is written meanwhile", "[kv][list]") {
  KvState kv;
  for (const char* key : {"a", "bb", "ccc", "dddd", "eeeee"}) kv.set(key, "v");
  std::unique_ptr<ddprun::rendezvous::KeyListing> listing = kv.listKeys();
  CHECK(listing->size() == 5);
  CHECK(listing->remainingBlobBytes() == 5 * 8 + 15);
  std::vector<std::string> names;
  names.emplace_back(*listing->next());
  names.emplace_back(*listing->next());
  // Writes while the listing is under way: an erased key still to come is still listed, one
  // already listed stays listed once, new keys are not listed, overwrites change nothing.
  kv.erase("dddd");
  kv.erase("a");
  kv.set("new", "v");
  kv.set("eeeee", "overwritten");
  kv.set("dddd", "again");  // erased and made again: listed once, from the snapshot
  while (auto name = listing->next()) names.emplace_back(*name);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a", "bb", "ccc", "dddd", "eeeee"});
  CHECK(listing->remainingBlobBytes() == 0);
  CHECK_FALSE(listing->nextSize().has_value());
}

TEST_CASE("a key listing survives the erasure of the very key it would yield next", "[kv][list]") {
  KvState kv;
  kv.set("first", "1");
  kv.set("second", "2");
  kv.set("third", "3");
  auto listing = kv.listKeys();
  auto other = kv.listKeys();  // two listings at once, at different points
  CHECK(listing->next() == "first");
  CHECK(listing->nextSize() == std::size_t{6});
  kv.erase("second");  // where `listing` stands
  kv.erase("first");   // where `other` stands
  std::vector<std::string> rest;
  while (auto name = listing->next()) rest.emplace_back(*name);
  std::sort(rest.begin(), rest.end());
  CHECK(rest == std::vector<std::string>{"second", "third"});
  std::vector<std::string> all;
  while (auto name = other->next()) all.emplace_back(*name);
  std::sort(all.begin(), all.end());
  CHECK(all == std::vector<std::string>{"first", "second", "third"});
  // An empty store lists nothing; a listing ended early leaves the state usable.
  KvState empty;
  CHECK(empty.listKeys()->size() == 0);
  listing.reset();
  other.reset();
  kv.set("fourth", "4");
  CHECK(kv.erase("third"));
}

TEST_CASE("prefix listings and deletions follow the keys as they come and go", "[kv][prefix]") {
  KvState kv;
  Recorder watcher;
  for (const char* key : {"r/2/b", "r/1/a", "r/10/a", "r/1/b", "q"}) kv.set(key, "v");
  kv.queuePush("r/1/queue", "item");  // queues are no keys
  kv.watch(&watcher, "r/1/a");
  auto listed = kv.listPrefix("r/1/", 100, 1 << 20);
  CHECK(listed.keys == std::vector<std::string>{"r/1/a", "r/1/b"});
  CHECK_FALSE(listed.more);
  // A snapshot listing (LIST_KEYS) in progress sees the erased keys still, as it always did.
  auto snapshot = kv.listKeys();
  const auto erased = kv.erasePrefix("r/1/", 100);
  CHECK(erased.erased == 2);
  CHECK_FALSE(erased.more);
  CHECK(watcher.events == std::vector<std::string>{"2:r/1/a:v>"});  // a deletion, as DELETE_KEY's
  std::size_t names = 0;
  while (snapshot->next()) ++names;
  CHECK(names == 5);
  CHECK(kv.numKeys() == 3);
  CHECK(kv.keyCount() == 3);  // the count a health check reads from another thread
  CHECK(kv.queueLength("r/1/queue") == 1);
  // The index follows a key erased and set again, and an erasure in batches.
  kv.set("r/1/a", "again");
  CHECK(kv.listPrefix("r/", 100, 1 << 20).keys ==
        std::vector<std::string>{"r/1/a", "r/10/a", "r/2/b"});
  const auto first = kv.erasePrefix("r/", 2);
  CHECK(first.erased == 2);
  CHECK(first.more);
  CHECK(kv.listPrefix("r/", 100, 1 << 20).keys == std::vector<std::string>{"r/2/b"});
  // Bounded by bytes, the first name always given.
  kv.set("long/a", std::string());
  kv.set("long/b", std::string());
  listed = kv.listPrefix("long/", 100, 3);
  CHECK(listed.keys == std::vector<std::string>{"long/a"});
  CHECK(listed.more);
  listed = kv.listPrefix("long/", 0, 1 << 20);
  CHECK(listed.keys.empty());
  CHECK(listed.more);
  CHECK(kv.keyCount() == kv.numKeys());  // after erasures too
  kv.forget(&watcher);
}
