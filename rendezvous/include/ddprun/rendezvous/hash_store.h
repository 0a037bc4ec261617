// HashStore: an in-process Store with exactly the server's semantics (it shares the server's
// KvState), for tests and for single-process use, holds included. Each HashStore object is one
// "connection": connect() gives another connection to the same data, and destroying one is what a
// closed TCP connection is to the server (its holds lapse). Time-to-live of holds is measured on
// the clock given at construction, so a test can move time by hand. A lapsed hold is reported
// as ddprun's server reports it (HoldLapse::kStoreNotifies, the default) or, for the tests of
// what the agents do over an etcd, only deleted (kKeyDeletedOnly); every connection of one store
// behaves the same.
//
// Thread-safe: one mutex (shared by every connection) guards the state, and blocked callers sleep
// on a condition variable without holding it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "ddprun/rendezvous/holding_store.h"

namespace ddprun::rendezvous {

class HashStore final : public HoldingStore {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Now = std::function<TimePoint()>;

  // `now` measures the holds' time-to-live (default: the steady clock); `lapse` is what a lapsed
  // hold does (HoldingStore).
  explicit HashStore(Now now = {}, HoldLapse lapse = HoldLapse::kStoreNotifies);
  // Closes this connection: its holds lapse, with notification.
  ~HashStore() override;

  // Another connection to the same data (thread-safe; may outlive this one).
  std::unique_ptr<HashStore> connect();

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  std::optional<std::string> tryGet(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(std::string_view key) override;
  std::int64_t numKeys() override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> listKeys() override;
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override;
  std::int64_t deletePrefix(std::string_view prefix) override;
  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override;
  bool release(std::string_view key) override;
  HoldLapse holdLapse() const override;
  std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                             Duration timeout) override;

 private:
  struct Shared;
  class Holder;
  explicit HashStore(std::shared_ptr<Shared> shared);
  // Blocks until `keys` have all appeared or `deadline` passes; `what` and `timeout` are for the
  // timeout message.
  void waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::steady_clock::time_point deadline, Duration timeout,
                  std::string_view what);

  std::shared_ptr<Shared> shared_;
  std::unique_ptr<Holder> holder_;  // this connection's identity for its holds
};

}  // namespace ddprun::rendezvous
