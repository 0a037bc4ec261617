#include "ddprun/rendezvous/hash_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "ddprun/common/shown_key.h"
#include "kv_state.h"
#include "protocol/wire.h"

namespace ddprun::rendezvous {
namespace {

// A blocked caller: KvState marks it done from inside the mutation that satisfies it, under the
// store's mutex; the caller then wakes on the condition variable.
class BlockedCall final : public KvObserver {
 public:
  void onWaitDone(std::uint64_t) override { done = true; }
  bool done = false;
};

// While holds exist, blocked callers wake this often to let lapsed holds report themselves (the
// server's sweep does the same every 50 ms).
constexpr auto kHoldSweep = std::chrono::milliseconds(10);

}  // namespace

struct HashStore::Shared {
  std::mutex mutex;
  std::condition_variable changed;
  KvState state;
  std::uint64_t nextWaitId = 1;
  Now now;
  HoldLapse lapse = HoldLapse::kStoreNotifies;

  // Every operation first lets lapsed holds report: there is no sweep thread.
  void expire() {
    if (state.hasHolds()) state.expireHolds(now());
  }
};

// The identity a connection's holds are registered under.
class HashStore::Holder final : public KvObserver {
 public:
  void onWaitDone(std::uint64_t) override {}
};

HashStore::HashStore(Now now, HoldLapse lapse)
    : shared_(std::make_shared<Shared>()), holder_(std::make_unique<Holder>()) {
  shared_->now = now ? std::move(now) : Now([] { return std::chrono::steady_clock::now(); });
  shared_->lapse = lapse;
}

HashStore::HashStore(std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)), holder_(std::make_unique<Holder>()) {}

HashStore::~HashStore() {
  std::lock_guard lock(shared_->mutex);
  shared_->state.forget(holder_.get());  // a closed connection: its holds lapse and report
  shared_->changed.notify_all();
}

std::unique_ptr<HashStore> HashStore::connect() {
  return std::unique_ptr<HashStore>(new HashStore(shared_));
}

void HashStore::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  shared_->state.set(key, std::string(value));
  shared_->changed.notify_all();
}

std::string HashStore::get(std::string_view key) {
  std::unique_lock lock(shared_->mutex);
  const Duration limit = timeout();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // A wait ends once the key has appeared, but it may be gone again (set, then deleted) by the
  // time this thread holds the mutex: then wait for it to come back, within the same deadline.
  for (;;) {
    waitLocked(lock, {std::string(key)}, deadline, limit, "get");
    if (const std::string* value = shared_->state.find(key)) return *value;
  }
}

std::optional<std::string> HashStore::tryGet(std::string_view key) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  if (const std::string* value = shared_->state.find(key)) return *value;
  return std::nullopt;
}

std::int64_t HashStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  std::optional<std::int64_t> value = shared_->state.add(key, delta);
  if (!value) {
    throw StoreError(
        fmt::format("add {}: the stored value is not an integer", common::shownKey(key)));
  }
  shared_->changed.notify_all();
  return *value;
}

std::string HashStore::compareSet(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  std::string result = shared_->state.compareSet(key, expected, desired);
  shared_->changed.notify_all();
  return result;
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(shared_->mutex);
  waitLocked(lock, keys, std::chrono::steady_clock::now() + timeout, timeout, "wait");
}

void HashStore::waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                           std::chrono::steady_clock::time_point deadline, Duration timeout,
                           std::string_view what) {
  Shared& shared = *shared_;
  shared.expire();
  BlockedCall call;
  if (shared.state.wait(&call, shared.nextWaitId++, keys)) return;
  bool done = false;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    const auto until = shared.state.hasHolds() ? std::min(deadline, now + kHoldSweep) : deadline;
    done = shared.changed.wait_until(lock, until, [&call] { return call.done; });
    if (done) break;
    shared.expire();  // a lapsed hold may write one of the keys
    if (call.done) {
      done = true;
      break;
    }
  }
  shared.state.forget(&call);
  if (!done) {
    std::string shown;
    for (const std::string& key : keys)
      shown += (shown.empty() ? "" : ", ") + common::shownKey(key);
    throw StoreTimeoutError(fmt::format("in-process store: {} timed out after {} ms, keys: {}",
                                        what, timeout.count(), shown));
  }
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  for (const std::string& key : keys) {
    if (!shared_->state.present(key)) return false;
  }
  return true;
}

bool HashStore::deleteKey(std::string_view key) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  const bool existed = shared_->state.erase(key);
  shared_->changed.notify_all();  // waitForAnyMissing looks for exactly this
  return existed;
}

std::int64_t HashStore::numKeys() {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  return static_cast<std::int64_t>(shared_->state.numKeys());
}

void HashStore::append(std::string_view key, std::string_view value) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  shared_->state.append(key, value);
  shared_->changed.notify_all();
}

std::vector<std::string> HashStore::listKeys() {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  return shared_->state.keys();
}

ListedKeys HashStore::listPrefix(std::string_view prefix, std::size_t maxKeys) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  KvState::PrefixListing listing =
      shared_->state.listPrefix(prefix, std::min(maxKeys, kMaxListedKeys), kMaxListedBytes);
  return ListedKeys{std::move(listing.keys), listing.more};
}

std::int64_t HashStore::deletePrefix(std::string_view prefix) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  // All at once: in process, nobody else is kept waiting on a network round trip.
  const auto erased = shared_->state.erasePrefix(prefix, std::numeric_limits<std::size_t>::max());
  shared_->changed.notify_all();
  return static_cast<std::int64_t>(erased.erased);
}

std::string HashStore::hold(std::string_view key, std::string_view value,
                            std::chrono::milliseconds ttl, std::string_view notifyKey,
                            std::string_view notifyValue) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  // A store that only deletes a lapsed hold's key is one whose holds carry no notice.
  const bool notifies = shared_->lapse == HoldLapse::kStoreNotifies;
  std::string held =
      shared_->state.hold(holder_.get(), key, value, ttl, notifies ? notifyKey : std::string_view(),
                          notifies ? notifyValue : std::string_view(), shared_->now());
  shared_->changed.notify_all();
  return held;
}

bool HashStore::release(std::string_view key) {
  std::lock_guard lock(shared_->mutex);
  shared_->expire();
  const bool held = shared_->state.release(holder_.get(), key);
  shared_->changed.notify_all();
  return held;
}

}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {

HoldLapse HashStore::holdLapse() const { return shared_->lapse; }

std::vector<std::string> HashStore::waitForAnyMissing(const std::vector<std::string>& keys,
                                                      Duration timeout) {
  std::unique_lock lock(shared_->mutex);
  Shared& shared = *shared_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    shared.expire();  // a lapsed hold is what this usually waits for
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (!shared.state.present(key)) missing.push_back(key);
    }
    if (!missing.empty() || keys.empty()) return missing;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    // Every deletion notifies; holds lapse only when someone looks, so look at the sweep's pace.
    const auto until = shared.state.hasHolds() ? std::min(deadline, now + kHoldSweep) : deadline;
    shared.changed.wait_until(lock, until);
  }
}

}  // namespace ddprun::rendezvous
