// Store::tryGet through the seam, in-process: the default form is check() then get() (for a
// backend with no atomic read), and a wrapper store forwards tryGet to the store it wraps, so
// that a backend's own one-request form (TcpStore's compareSet probe, EtcdStore's range read,
// HashStore under its lock) is not lost behind a PrefixStore. Each backend's own form is in the
// store conformance suite (store_conformance_test, store_conformance_etcd_test). Unit tests:
// milliseconds, no I/O.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/prefix_store.h"

using namespace ddprun::rendezvous;

namespace {

// A store with no tryGet of its own: the default form. It records every call.
class Recording final : public Store {
 public:
  void set(std::string_view key, std::string_view value) override {
    values[std::string(key)] = value;
  }
  std::string get(std::string_view key) override {
    calls.push_back("get " + std::string(key));
    return values.at(std::string(key));
  }
  std::int64_t add(std::string_view, std::int64_t) override { return 0; }
  std::string compareSet(std::string_view, std::string_view, std::string_view) override {
    return {};
  }
  void wait(const std::vector<std::string>&, Duration) override {}
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override {
    calls.push_back("check " + keys.at(0));
    return values.count(keys.at(0)) != 0;
  }
  bool deleteKey(std::string_view) override { return false; }
  std::int64_t numKeys() override { return 0; }

  std::map<std::string, std::string> values;
  std::vector<std::string> calls;
};

// A store whose tryGet is its own: what a backend that overrides it looks like to a wrapper.
class OwnTryGet final : public Store {
 public:
  void set(std::string_view, std::string_view) override {}
  std::string get(std::string_view key) override {
    calls.push_back("get " + std::string(key));
    return {};
  }
  std::optional<std::string> tryGet(std::string_view key) override {
    calls.push_back("tryGet " + std::string(key));
    return std::string("own");
  }
  std::int64_t add(std::string_view, std::int64_t) override { return 0; }
  std::string compareSet(std::string_view, std::string_view, std::string_view) override {
    return {};
  }
  void wait(const std::vector<std::string>&, Duration) override {}
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override {
    calls.push_back("check " + keys.at(0));
    return true;
  }
  bool deleteKey(std::string_view) override { return false; }
  std::int64_t numKeys() override { return 0; }

  std::vector<std::string> calls;
};

}  // namespace

TEST_CASE("the default tryGet is check() then get(): nothing for a missing key, the value else",
          "[try_get][unit]") {
  Recording store;
  CHECK_FALSE(store.tryGet("k").has_value());
  CHECK(store.calls == std::vector<std::string>{"check k"});  // no get(): it would block
  store.set("k", "v");
  store.set("empty", "");
  CHECK(store.tryGet("k") == std::optional<std::string>("v"));
  CHECK(store.tryGet("empty") == std::optional<std::string>(""));
  CHECK(store.calls ==
        std::vector<std::string>{"check k", "check k", "get k", "check empty", "get empty"});
}

TEST_CASE("a PrefixStore forwards tryGet to the wrapped store's own form, under its prefix",
          "[try_get][unit]") {
  auto base = std::make_shared<OwnTryGet>();
  PrefixStore prefixed(base, "job/3");
  CHECK(prefixed.tryGet("round/0/closed") == std::optional<std::string>("own"));
  CHECK(base->calls == std::vector<std::string>{"tryGet job/3/round/0/closed"});
}

TEST_CASE("a PrefixStore over a HashStore reads its own namespace", "[try_get][unit]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore prefixed(base, "job");
  base->set("k", "outside");
  CHECK_FALSE(prefixed.tryGet("k").has_value());
  prefixed.set("k", "inside");
  CHECK(prefixed.tryGet("k") == std::optional<std::string>("inside"));
  CHECK(base->tryGet("job/k") == std::optional<std::string>("inside"));
}
