// One conformance suite, run against every Store implementation: whatever backend the agent or
// the runtime is given, it must behave the same.
//
// Built twice: store_conformance_test runs the in-process and TCP backends; with
// DDPRUN_CONFORMANCE_ETCD defined, store_conformance_etcd_test runs EtcdStore alone, on one real
// 3-member etcd (Debian's etcd-server) for the binary's life, each fixture under a prefix of its
// own (skipped, 77, without /usr/bin/etcd). What differs between backends is asked of the
// fixture (canListKeys, connectBase, holdTtl), never of the backend's name.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/prefix_store.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "test_server.h"
#ifdef DDPRUN_CONFORMANCE_ETCD
#include <unistd.h>

#include "ddprun/rendezvous/etcd_store.h"
#include "etcd_cluster.h"
#endif

using namespace ddprun::rendezvous;
using ddprun::test::TestServer;
using namespace std::chrono_literals;

namespace {

enum class Backend { kHash, kPrefixHash, kTcp2, kTcp113, kPrefixTcp2, kEtcd };

#ifdef DDPRUN_CONFORMANCE_ETCD
// One cluster for the whole binary (started at the first fixture, ~2 s).
ddprun::test::EtcdCluster& etcdCluster() {
  ddprun::test::EtcdCluster::skipUnlessInstalled();
  static ddprun::test::EtcdCluster cluster;
  return cluster;
}

// A client of the cluster and a key prefix no other fixture of this run (or another run sharing
// the machine) uses: the store is empty at the start of each case, as a fresh server is.
struct EtcdPlace {
  std::shared_ptr<etcd::EtcdClient> client;
  std::string keyPrefix;
};

EtcdPlace freshEtcdPlace() {
  static int fixtures = 0;
  etcd::EtcdClientOptions options;
  options.endpoints = etcd::parseEtcdEndpoints(etcdCluster().endpoints());
  return {std::make_shared<etcd::EtcdClient>(options),
          fmt::format("/ddprun-conformance/{}-{}/", ::getpid(), ++fixtures)};
}
#endif

std::string backendName(Backend b) {
  switch (b) {
    case Backend::kHash:
      return "HashStore";
    case Backend::kPrefixHash:
      return "PrefixStore(HashStore)";
    case Backend::kTcp2:
      return "TcpStore(torch-2.x) -> RendezvousServer";
    case Backend::kTcp113:
      return "TcpStore(torch-1.13) -> RendezvousServer";
    case Backend::kPrefixTcp2:
      return "PrefixStore(TcpStore(torch-2.x))";
    case Backend::kEtcd:
      return "EtcdStore -> etcd (3 members)";
  }
  return "?";
}

// One backend under test. connect() returns a further client of the same store, as another
// process (or thread) of the job would have.
class Fixture {
 public:
  explicit Fixture(Backend backend) : backend_(backend) {
    if (backend == Backend::kHash || backend == Backend::kPrefixHash) {
      hash_ = std::make_shared<HashStore>();
    } else if (backend == Backend::kEtcd) {
#ifdef DDPRUN_CONFORMANCE_ETCD
      etcd_ = freshEtcdPlace();
#endif
    } else {
      server_ = std::make_unique<TestServer>();
    }
  }

  std::shared_ptr<Store> connect() {
    switch (backend_) {
      case Backend::kHash:
        return hash_;
      case Backend::kPrefixHash:
        return std::make_shared<PrefixStore>(hash_, "job/3");
      case Backend::kTcp2:
        return std::make_shared<TcpStore>(server_->clientOptions());
      case Backend::kTcp113:
        return std::make_shared<TcpStore>(server_->clientOptions(WireDialect::kTorch113));
      case Backend::kPrefixTcp2:
        return std::make_shared<PrefixStore>(std::make_shared<TcpStore>(server_->clientOptions()),
                                             "job/3");
      case Backend::kEtcd:
#ifdef DDPRUN_CONFORMANCE_ETCD
        return std::make_shared<EtcdStore>(etcd_.client, etcd_.keyPrefix);
#endif
        break;
    }
    return nullptr;
  }

  bool canListKeys() const { return backend_ != Backend::kTcp113; }

  // A client of the store underneath: the PrefixStore's wrapped store (another namespace's
  // view), otherwise the same as connect().
  std::shared_ptr<Store> connectBase() {
    switch (backend_) {
      case Backend::kPrefixHash:
        return hash_;
      case Backend::kPrefixTcp2:
        return std::make_shared<TcpStore>(server_->clientOptions());
      default:
        return connect();
    }
  }

 private:
  Backend backend_;
  std::shared_ptr<HashStore> hash_;
  std::unique_ptr<TestServer> server_;
#ifdef DDPRUN_CONFORMANCE_ETCD
  EtcdPlace etcd_;
#endif
};

Backend anyBackend() {
#ifdef DDPRUN_CONFORMANCE_ETCD
  return GENERATE(Backend::kEtcd);
#else
  return GENERATE(Backend::kHash, Backend::kPrefixHash, Backend::kTcp2, Backend::kTcp113,
                  Backend::kPrefixTcp2);
#endif
}

}  // namespace

TEST_CASE("set, get and overwrite keep bytes exactly", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  store->set("k", "v1");
  CHECK(store->get("k") == "v1");
  store->set("k", "v2");
  CHECK(store->get("k") == "v2");
  const std::string binary("\0\xff\x10 with NUL\0", 13);
  store->set("bin", binary);
  CHECK(store->get("bin") == binary);
  store->set("empty", "");
  CHECK(store->get("empty").empty());
  const std::string big(1 << 20, 'x');
  store->set("big", big);
  CHECK(store->get("big") == big);
}

TEST_CASE("get of a missing key blocks until the timeout, then the store still works",
          "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  store->setTimeout(200ms);
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(store->get("missing"), StoreTimeoutError);
  CHECK(std::chrono::steady_clock::now() - started >= 190ms);
  store->set("after", "ok");
  CHECK(store->get("after") == "ok");
  CHECK(store->add("counter", 1) == 1);
}

TEST_CASE("a get whose key is set and deleted again before it reads waits for the key to return",
          "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto reader = fixture.connect();
  auto writer = fixture.connect();
  reader->setTimeout(5s);
  for (int round = 0; round < 10; ++round) {
    const std::string key = "flicker" + std::to_string(round);
    std::string got;
    std::string error;
    std::thread waiting([&] {
      try {
        got = reader->get(key);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    std::this_thread::sleep_for(20ms);  // the reader is parked on the key
    // Set and delete back to back: the reader's wait is satisfied, but the key is usually gone
    // by the time it reads. It must neither crash, nor see "", nor lose its connection.
    writer->set(key, "gone");
    writer->deleteKey(key);
    std::this_thread::sleep_for(20ms);
    writer->set(key, "final");
    waiting.join();
    INFO("round " << round);
    CHECK(error.empty());
    CHECK((got == "final" || got == "gone"));
  }
}

TEST_CASE("a blocking get is woken by another client's set", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto reader = fixture.connect();
  auto writer = fixture.connect();
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    writer->set("late", "here");
  });
  CHECK(reader->get("late") == "here");
  later.join();
}

TEST_CASE("add counts in ASCII decimal from zero", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  CHECK(store->add("c", 5) == 5);
  CHECK(store->add("c", -3) == 2);
  CHECK(store->add("c", 0) == 2);
  CHECK(store->get("c") == "2");
  store->set("d", "40");
  CHECK(store->add("d", 2) == 42);
}

TEST_CASE("compareSet follows c10d's four cases", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  // Missing key, empty expected: created.
  CHECK(store->compareSet("cs", "", "new") == "new");
  CHECK(store->get("cs") == "new");
  // Missing key, non-empty expected: not created, `expected` echoed.
  CHECK(store->compareSet("cs2", "x", "y") == "x");
  CHECK_FALSE(store->check({"cs2"}));
  // Mismatch: unchanged, current value returned.
  CHECK(store->compareSet("cs", "wrong", "z") == "new");
  // Match: swapped.
  CHECK(store->compareSet("cs", "new", "z") == "z");
  CHECK(store->get("cs") == "z");
}

TEST_CASE("wait returns when keys exist and times out when they do not", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  store->set("a", "1");
  store->set("b", "2");
  store->wait({"a", "b"}, 1s);
  store->wait({}, 1s);
  CHECK_THROWS_AS(store->wait({"a", "nope"}, 150ms), StoreTimeoutError);
  // Still in sync after the timeout.
  CHECK(store->get("a") == "1");

  auto other = fixture.connect();
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    other->set("x", "1");
    std::this_thread::sleep_for(50ms);
    other->add("y", 1);
  });
  store->wait({"x", "y"}, 5s);
  later.join();
}

TEST_CASE("check, deleteKey and numKeys", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  CHECK(store->check({}));
  CHECK_FALSE(store->check({"k"}));
  store->set("k", "v");
  store->set("l", "w");
  CHECK(store->check({"k", "l"}));
  CHECK_FALSE(store->check({"k", "m"}));
  CHECK(store->numKeys() == 2);
  CHECK(store->deleteKey("k"));
  CHECK_FALSE(store->deleteKey("k"));
  CHECK_FALSE(store->check({"k"}));
  CHECK(store->numKeys() == 1);
}

TEST_CASE("tryGet reads a key as it is now and never blocks", "[store][conformance][try_get]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  auto other = fixture.connect();
  store->setTimeout(5s);  // a tryGet that blocked would show in the time taken
  const auto started = std::chrono::steady_clock::now();
  CHECK_FALSE(store->tryGet("missing").has_value());
  other->set("k", "v");
  CHECK(store->tryGet("k") == std::optional<std::string>("v"));
  other->set("empty", "");  // present and empty is not missing
  CHECK(store->tryGet("empty") == std::optional<std::string>(""));
  const std::string binary("\0\xff with NUL\0", 12);
  other->set("bin", binary);
  CHECK(store->tryGet("bin") == std::optional<std::string>(binary));
  // The values TcpStore probes with are values like any other.
  other->set("probe", "<ddprun get probe 1>");
  CHECK(store->tryGet("probe") == std::optional<std::string>("<ddprun get probe 1>"));
  // Deleted meanwhile: missing at once, not a wait for it to come back.
  CHECK(other->deleteKey("k"));
  CHECK_FALSE(store->tryGet("k").has_value());
  CHECK(std::chrono::steady_clock::now() - started < 4s);
  // A read changes nothing: the missing key is still missing, the present one unchanged.
  CHECK_FALSE(other->check({"missing"}));
  CHECK(other->get("empty").empty());
}

TEST_CASE("multiGet, multiSet and append", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  store->multiSet({"m1", "m2", "m3"}, {"1", "22", ""});
  CHECK(store->multiGet({"m3", "m1", "m2"}) == std::vector<std::string>{"", "1", "22"});
  CHECK_THROWS_AS(store->multiSet({"a"}, {}), StoreError);
  store->append("log", "ab");
  store->append("log", "c");
  CHECK(store->get("log") == "abc");
  // The key already holds exactly the bytes appended (a compareSet loop that guesses "" first
  // would take the answer "x" for its own swap).
  store->set("same", "x");
  store->append("same", "x");
  CHECK(store->get("same") == "xx");
  store->append("created", "x");
  store->append("created", "x");
  CHECK(store->get("created") == "xx");
  store->setTimeout(150ms);
  CHECK_THROWS_AS(store->multiGet({"m1", "absent"}), StoreTimeoutError);
}

TEST_CASE("listKeys shows this store's keys, or says it cannot", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  store->set("one", "1");
  store->set("two", "2");
  if (fixture.canListKeys()) {
    auto keys = store->listKeys();
    std::sort(keys.begin(), keys.end());
    CHECK(keys == std::vector<std::string>{"one", "two"});
  } else {
    CHECK_THROWS_AS(store->listKeys(), StoreUnsupportedError);
  }
}

TEST_CASE("barrier releases all members together", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  constexpr int kMembers = 4;
  std::atomic<int> arrived{0};
  std::atomic<int> leftEarly{0};
  std::vector<std::thread> members;
  for (int i = 0; i < kMembers; ++i) {
    members.emplace_back([&] {
      auto store = fixture.connect();
      arrived.fetch_add(1);
      store->barrier("round0", kMembers, 10s);
      if (arrived.load() < kMembers) leftEarly.fetch_add(1);
    });
  }
  for (auto& t : members) t.join();
  CHECK(leftEarly.load() == 0);
  auto store = fixture.connect();
  CHECK_THROWS_AS(store->barrier("lonely", 2, 100ms), StoreTimeoutError);
}

TEST_CASE("concurrent adds from many clients are exact", "[store][conformance]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  constexpr int kThreads = 8;
  constexpr int kAdds = 500;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto store = fixture.connect();
      for (int n = 0; n < kAdds; ++n) store->add("hammer", 1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(fixture.connect()->add("hammer", 0) == kThreads * kAdds);
}

TEST_CASE("tickets from many clients at once are 1..N, each once, and the count is N",
          "[store][conformance][ticket]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  // 64 takers at once, one connection each, as agents joining a round (on etcd: 64 puts that no
  // race fails, where add's guarded writes retry).
  constexpr int kTakers = 64;
  std::vector<std::int64_t> taken(kTakers);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kTakers; ++i) {
    threads.emplace_back([&, i] {
      auto store = fixture.connect();
      ready.fetch_add(1);
      while (ready.load() < kTakers) std::this_thread::yield();  // bounded: every thread gets here
      taken[static_cast<std::size_t>(i)] = store->takeTicket("tickets");
    });
  }
  for (auto& t : threads) t.join();
  std::sort(taken.begin(), taken.end());
  std::vector<std::int64_t> expected(kTakers);
  for (int i = 0; i < kTakers; ++i) expected[static_cast<std::size_t>(i)] = i + 1;
  CHECK(taken == expected);
  auto store = fixture.connect();
  CHECK(store->ticketCount("tickets") == kTakers);
  CHECK(store->ticketCount("no tickets yet") == 0);
  // A deleted ticket key starts again at 1.
  CHECK(store->deleteKey("tickets"));
  CHECK(store->takeTicket("tickets") == 1);
  CHECK(store->ticketCount("tickets") == 1);
}

TEST_CASE("listPrefix lists the keys under a prefix in byte order, or says it cannot",
          "[store][conformance][prefix]") {
  const Backend backend = anyBackend();
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  const std::string binary("p/\0z", 4);
  for (const std::string& key :
       {std::string("p/b"), std::string("p/a"), std::string("p/c/1"), std::string("p/\xff"), binary,
        std::string("p"), std::string("pa"), std::string("q/a")}) {
    store->set(key, "v");
  }
  if (!fixture.canListKeys()) {
    CHECK_THROWS_AS(store->listPrefix("p/", Store::kMaxListedKeys), StoreUnsupportedError);
    CHECK_THROWS_AS(store->deletePrefix("p/"), StoreUnsupportedError);
    return;
  }
  // memcmp order: NUL first, 0xff last (unsigned bytes, as etcd orders keys).
  const std::vector<std::string> under = {binary, "p/a", "p/b", "p/c/1", "p/\xff"};
  ListedKeys listed = store->listPrefix("p/", Store::kMaxListedKeys);
  CHECK(listed.keys == under);
  CHECK_FALSE(listed.more);
  listed = store->listPrefix("p/", 2);
  CHECK(listed.keys == std::vector<std::string>(under.begin(), under.begin() + 2));
  CHECK(listed.more);
  // maxKeys 0: only whether anything is there.
  CHECK(store->listPrefix("p/", 0).keys.empty());
  CHECK(store->listPrefix("p/", 0).more);
  CHECK_FALSE(store->listPrefix("nothing/", 0).more);
  CHECK(store->listPrefix("p/c/", 10).keys == std::vector<std::string>{"p/c/1"});
  // "" is everything this store sees: a PrefixStore's own keys, never another namespace's.
  fixture.connectBase()->set("elsewhere", "v");
  listed = store->listPrefix("", Store::kMaxListedKeys);
  CHECK(std::is_sorted(listed.keys.begin(), listed.keys.end()));
  CHECK(std::count(listed.keys.begin(), listed.keys.end(), "elsewhere") ==
        (backend == Backend::kPrefixHash || backend == Backend::kPrefixTcp2 ? 0 : 1));
  CHECK(std::count(listed.keys.begin(), listed.keys.end(), "q/a") == 1);
}

TEST_CASE("a listing stops at its limit of names and bytes", "[store][conformance][prefix]") {
  const Backend backend = anyBackend();
  if (backend == Backend::kTcp113) return;  // no listing in 1.13 (the test above)
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (std::size_t i = 0; i < Store::kMaxListedKeys + 10; ++i) {
    keys.push_back(fmt::format("many/{:05}", i));
    values.emplace_back();
  }
  store->multiSet(keys, values);
  ListedKeys listed = store->listPrefix("many/", std::numeric_limits<std::size_t>::max());
  REQUIRE(listed.keys.size() == Store::kMaxListedKeys);
  CHECK(listed.more);
  CHECK(listed.keys.front() == "many/00000");
  CHECK(listed.keys.back() == fmt::format("many/{:05}", Store::kMaxListedKeys - 1));
  // Long names: the byte bound comes first (300 names of 4000 bytes are over 1 MiB).
  keys.clear();
  values.clear();
  for (int i = 0; i < 300; ++i) {
    keys.push_back(fmt::format("long/{:03}/{}", i, std::string(4000, 'n')));
    values.emplace_back();
  }
  store->multiSet(keys, values);
  listed = store->listPrefix("long/", Store::kMaxListedKeys);
  CHECK(listed.more);
  CHECK(listed.keys.size() >= 200);
  CHECK(listed.keys.size() < 300);
  std::size_t bytes = 0;
  for (const std::string& key : listed.keys) bytes += key.size();
  CHECK(bytes <= Store::kMaxListedBytes);
}

TEST_CASE("deletePrefix deletes exactly the keys under a prefix", "[store][conformance][prefix]") {
  const Backend backend = anyBackend();
  if (backend == Backend::kTcp113) return;  // unsupported there (the listing test checks it)
  INFO(backendName(backend));
  Fixture fixture(backend);
  auto store = fixture.connect();
  for (const char* key : {"r/1/a", "r/1/b", "r/1/c/d", "r/10/a", "r/1", "q"}) store->set(key, "v");
  CHECK(store->deletePrefix("r/1/") == 3);
  CHECK_FALSE(store->check({"r/1/a"}));
  CHECK_FALSE(store->check({"r/1/c/d"}));
  CHECK(store->check({"r/10/a", "r/1", "q"}));  // round 10 is not round 1
  CHECK(store->deletePrefix("r/1/") == 0);
  // More than one server batch.
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < 2 * Store::kMaxListedKeys + 5; ++i)
    keys.push_back(fmt::format("bulk/{}", i));
  store->multiSet(keys, std::vector<std::string>(keys.size(), "x"));
  CHECK(store->deletePrefix("bulk/") == static_cast<std::int64_t>(keys.size()));
  CHECK_FALSE(store->listPrefix("bulk/", 0).more);
  // "" is everything this store sees, and nothing another namespace holds.
  auto base = fixture.connectBase();
  base->set("outside", "v");
  const bool prefixed = backend == Backend::kPrefixHash || backend == Backend::kPrefixTcp2;
  CHECK(store->deletePrefix("") == (prefixed ? 3 : 4));
  CHECK(base->check({"outside"}) == prefixed);
}

namespace {

// A HoldingStore under test: a connection per call of connect(), as each agent has its own.
enum class Holding { kHashNotifies, kHashDeletesOnly, kTcp2, kEtcd };

Holding anyHolding() {
#ifdef DDPRUN_CONFORMANCE_ETCD
  return GENERATE(Holding::kEtcd);
#else
  return GENERATE(Holding::kHashNotifies, Holding::kHashDeletesOnly, Holding::kTcp2);
#endif
}

class HoldingFixture {
 public:
  explicit HoldingFixture(Holding kind) : kind_(kind) {
    if (kind == Holding::kTcp2) {
      server_ = std::make_unique<TestServer>();
    } else if (kind == Holding::kEtcd) {
#ifdef DDPRUN_CONFORMANCE_ETCD
      etcd_ = freshEtcdPlace();
#endif
    } else {
      hash_ = std::make_unique<HashStore>(HashStore::Now{}, kind == Holding::kHashNotifies
                                                                ? HoldLapse::kStoreNotifies
                                                                : HoldLapse::kKeyDeletedOnly);
    }
  }
  std::unique_ptr<HoldingStore> connect() {
    if (server_) return std::make_unique<TcpStore>(server_->clientOptions());
#ifdef DDPRUN_CONFORMANCE_ETCD
    if (kind_ == Holding::kEtcd) return std::make_unique<EtcdStore>(etcd_.client, etcd_.keyPrefix);
#endif
    return hash_->connect();
  }
  HoldLapse expected() const {
    return kind_ == Holding::kHashDeletesOnly || kind_ == Holding::kEtcd
               ? HoldLapse::kKeyDeletedOnly
               : HoldLapse::kStoreNotifies;
  }
  // The time-to-live of a hold that lasts as long as its connection. ddprun's store and
  // HashStore tie a ttl-0 hold to the connection; on etcd only a leased hold (ttl > 0) goes with
  // its store (the lease revoked when it closes), while a ttl-0 hold is a plain key. Long enough
  // that nothing lapses by time during a case.
  std::chrono::milliseconds holdTtl() const { return kind_ == Holding::kEtcd ? 30s : 0ms; }

 private:
  Holding kind_;
  std::unique_ptr<HashStore> hash_;
  std::unique_ptr<TestServer> server_;
#ifdef DDPRUN_CONFORMANCE_ETCD
  EtcdPlace etcd_;
#endif
};

}  // namespace

TEST_CASE(
    "a lapsed hold: the key goes, and the notice is written where the store says it writes it",
    "[store][conformance][hold]") {
  const Holding kind = anyHolding();
  HoldingFixture fixture(kind);
  auto watcher = fixture.connect();
  auto holder = fixture.connect();
  CHECK(watcher->holdLapse() == fixture.expected());
  CHECK(holder->holdLapse() == fixture.expected());
  REQUIRE(holder->hold("alive/1", "n1", fixture.holdTtl(), "stop", "lost n1") == "n1");
  REQUIRE(holder->hold("alive/2", "n2", fixture.holdTtl(), "stop", "lost n2") == "n2");
  CHECK(watcher->waitForAnyMissing({"alive/1", "alive/2"}, 50ms).empty());  // both held
  CHECK(watcher->waitForAnyMissing({}, 5s).empty());                        // nothing to watch
  std::vector<std::string> missing;
  std::thread watching([&] { missing = watcher->waitForAnyMissing({"alive/1", "alive/2"}, 10s); });
  std::this_thread::sleep_for(50ms);
  const auto dropped = std::chrono::steady_clock::now();
  holder.reset();  // the connection closes: every hold of it lapses
  watching.join();
  CHECK(std::chrono::steady_clock::now() - dropped < 5s);
  CHECK(missing == std::vector<std::string>{"alive/1", "alive/2"});  // in the order given
  if (fixture.expected() == HoldLapse::kStoreNotifies) {
    watcher->setTimeout(5s);
    const std::string notice = watcher->get("stop");
    CHECK((notice == "lost n1" || notice == "lost n2"));
  } else {
    CHECK_FALSE(watcher->check({"stop"}));
    // What the peers do instead: create-if-absent, so the first report wins.
    CHECK(watcher->compareSet("stop", "", "lost n2") == "lost n2");
    CHECK(watcher->compareSet("stop", "", "lost n1") == "lost n2");
  }
}

TEST_CASE("a quietly released hold is missing to a watcher too", "[store][conformance][hold]") {
  const Holding kind = anyHolding();
  HoldingFixture fixture(kind);
  auto watcher = fixture.connect();
  auto holder = fixture.connect();
  REQUIRE(holder->hold("alive/1", "n1", fixture.holdTtl(), "stop", "lost n1") == "n1");
  std::vector<std::string> missing;
  std::thread watching([&] {
    missing = watcher->waitForAnyMissing({"absent-never", "alive/1"}, 10s);
  });
  watching.join();  // one of them is missing from the start
  CHECK(missing == std::vector<std::string>{"absent-never"});
  CHECK(holder->release("alive/1"));
  CHECK(watcher->waitForAnyMissing({"alive/1"}, 5s) == std::vector<std::string>{"alive/1"});
  CHECK_FALSE(watcher->check({"stop"}));  // released, not lost: no notice either way
}
