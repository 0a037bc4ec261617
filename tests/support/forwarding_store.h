// ForwardingStore: a HoldingStore that hands every call of the Store and HoldingStore contract to
// the store it wraps, as LevelDB's EnvWrapper does for an Env. A test's fake store derives from it
// and overrides only the calls it changes (counts, cuts, delays), so every other call reaches the
// wrapped store in the form that store serves: its own tryGet, tickets, multiGet and multiSet,
// never the Store defaults built out of single calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/holding_store.h"

namespace ddprun::test {

class ForwardingStore : public rendezvous::HoldingStore {
 public:
  // Wraps `target`; this store's timeout() starts as the target's.
  explicit ForwardingStore(std::shared_ptr<rendezvous::HoldingStore> target)
      : target_(std::move(target)) {
    Store::setTimeout(target_->timeout());
  }

  void set(std::string_view key, std::string_view value) override { target()->set(key, value); }
  std::string get(std::string_view key) override { return target()->get(key); }
  std::optional<std::string> tryGet(std::string_view key) override { return target()->tryGet(key); }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return target()->add(key, delta);
  }
  std::int64_t takeTicket(std::string_view key) override { return target()->takeTicket(key); }
  std::int64_t ticketCount(std::string_view key) override { return target()->ticketCount(key); }
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override {
    return target()->compareSet(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    target()->wait(keys, timeout);
  }
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override { return target()->check(keys); }
  bool deleteKey(std::string_view key) override { return target()->deleteKey(key); }
  std::int64_t numKeys() override { return target()->numKeys(); }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    return target()->multiGet(keys);
  }
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::string>& values) override {
    target()->multiSet(keys, values);
  }
  void append(std::string_view key, std::string_view value) override {
    target()->append(key, value);
  }
  std::vector<std::string> listKeys() override { return target()->listKeys(); }
  rendezvous::ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override {
    return target()->listPrefix(prefix, maxKeys);
  }
  std::int64_t deletePrefix(std::string_view prefix) override {
    return target()->deletePrefix(prefix);
  }
  void barrier(std::string_view key, std::int64_t worldSize, Duration timeout) override {
    target()->barrier(key, worldSize, timeout);
  }
  void setTimeout(Duration timeout) override {
    Store::setTimeout(timeout);
    target()->setTimeout(timeout);
  }

  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override {
    return target()->hold(key, value, ttl, notifyKey, notifyValue);
  }
  bool release(std::string_view key) override { return target()->release(key); }
  rendezvous::HoldLapse holdLapse() const override { return target()->holdLapse(); }
  std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                             Duration timeout) override {
    return target()->waitForAnyMissing(keys, timeout);
  }

 protected:
  // For a fake that decides per call where a call goes: it overrides target().
  ForwardingStore() = default;

  // The store a call goes to: the wrapped one. A fake whose store can go away under it (a severed
  // connection) overrides this; the pointer it returns keeps that store alive for the call.
  virtual std::shared_ptr<rendezvous::HoldingStore> target() const { return target_; }

 private:
  std::shared_ptr<rendezvous::HoldingStore> target_;
};

}  // namespace ddprun::test
