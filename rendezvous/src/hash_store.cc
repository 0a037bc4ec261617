#include "ddprun/rendezvous/hash_store.h"

#include <fmt/format.h>

#include "kv_state.h"

namespace ddprun::rendezvous {
namespace {

// A blocked caller: KvState marks it done from inside the mutation that satisfies it, under the
// store's mutex; the caller then wakes on the condition variable.
class BlockedCall final : public KvObserver {
 public:
  void onWaitDone(std::uint64_t) override { done = true; }
  bool done = false;
};

}  // namespace

HashStore::HashStore() : state_(std::make_unique<KvState>()) {}
HashStore::~HashStore() = default;

void HashStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mutex_);
  state_->set(key, std::string(value));
  changed_.notify_all();
}

std::string HashStore::get(std::string_view key) {
  std::unique_lock lock(mutex_);
  const Duration limit = timeout();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // A wait ends once the key has appeared, but it may be gone again (set, then deleted) by the
  // time this thread holds the mutex: then wait for it to come back, within the same deadline.
  for (;;) {
    waitLocked(lock, {std::string(key)}, deadline, limit, "get");
    if (const std::string* value = state_->find(key)) return *value;
  }
}

std::int64_t HashStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  std::optional<std::int64_t> value = state_->add(key, delta);
  if (!value) {
    throw StoreError(fmt::format("add '{}': the stored value is not an integer", key));
  }
  changed_.notify_all();
  return *value;
}

std::string HashStore::compareSet(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  std::lock_guard lock(mutex_);
  std::string result = state_->compareSet(key, expected, desired);
  changed_.notify_all();
  return result;
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mutex_);
  waitLocked(lock, keys, std::chrono::steady_clock::now() + timeout, timeout, "wait");
}

void HashStore::waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                           std::chrono::steady_clock::time_point deadline, Duration timeout,
                           std::string_view what) {
  BlockedCall call;
  if (state_->wait(&call, nextWaitId_++, keys)) return;
  const bool done = changed_.wait_until(lock, deadline, [&call] { return call.done; });
  state_->forget(&call);
  if (!done) {
    throw StoreTimeoutError(fmt::format("in-process store: {} timed out after {} ms, keys: {}",
                                        what, timeout.count(), fmt::join(keys, ", ")));
  }
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  for (const std::string& key : keys) {
    if (!state_->present(key)) return false;
  }
  return true;
}

bool HashStore::deleteKey(std::string_view key) {
  std::lock_guard lock(mutex_);
  return state_->erase(key);
}

std::int64_t HashStore::numKeys() {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(state_->numKeys());
}

void HashStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(mutex_);
  state_->append(key, value);
  changed_.notify_all();
}

std::vector<std::string> HashStore::listKeys() {
  std::lock_guard lock(mutex_);
  return state_->keys();
}

}  // namespace ddprun::rendezvous
