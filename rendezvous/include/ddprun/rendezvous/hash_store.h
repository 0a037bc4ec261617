// HashStore: an in-process Store with exactly the server's semantics (it shares the server's
// KvState), for tests and for single-process use. Thread-safe: one mutex guards the state, and
// blocked callers sleep on a condition variable without holding it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

class KvState;

class HashStore final : public Store {
 public:
  HashStore();
  ~HashStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
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

 private:
  // Blocks until `keys` have all appeared or `deadline` passes; `what` and `timeout` are for the
  // timeout message.
  void waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::steady_clock::time_point deadline, Duration timeout,
                  std::string_view what);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<KvState> state_;
  std::uint64_t nextWaitId_ = 1;
};

}  // namespace ddprun::rendezvous
