// One conformance suite, run against every Store implementation: whatever backend the agent or
// the runtime is given, it must behave the same.
#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/prefix_store.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "test_server.h"

using namespace ddprun::rendezvous;
using ddprun::test::TestServer;
using namespace std::chrono_literals;

namespace {

enum class Backend { kHash, kPrefixHash, kTcp2, kTcp113, kPrefixTcp2 };

std::string backendName(Backend b) {
  switch (b) {
    case Backend::kHash: return "HashStore";
    case Backend::kPrefixHash: return "PrefixStore(HashStore)";
    case Backend::kTcp2: return "TcpStore(torch-2.x) -> RendezvousServer";
    case Backend::kTcp113: return "TcpStore(torch-1.13) -> RendezvousServer";
    case Backend::kPrefixTcp2: return "PrefixStore(TcpStore(torch-2.x))";
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
    } else {
      server_ = std::make_unique<TestServer>();
    }
  }

  std::shared_ptr<Store> connect() {
    switch (backend_) {
      case Backend::kHash: return hash_;
      case Backend::kPrefixHash: return std::make_shared<PrefixStore>(hash_, "job/3");
      case Backend::kTcp2: return std::make_shared<TcpStore>(server_->clientOptions());
      case Backend::kTcp113:
        return std::make_shared<TcpStore>(server_->clientOptions(WireDialect::kTorch113));
      case Backend::kPrefixTcp2:
        return std::make_shared<PrefixStore>(std::make_shared<TcpStore>(server_->clientOptions()),
                                             "job/3");
    }
    return nullptr;
  }

  bool canListKeys() const { return backend_ != Backend::kTcp113; }

 private:
  Backend backend_;
  std::shared_ptr<HashStore> hash_;
  std::unique_ptr<TestServer> server_;
};

Backend anyBackend() {
  return GENERATE(Backend::kHash, Backend::kPrefixHash, Backend::kTcp2, Backend::kTcp113,
                  Backend::kPrefixTcp2);
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
