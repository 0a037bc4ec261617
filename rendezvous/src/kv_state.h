// KvState: the store's data and its waiters, with c10d TCPStore semantics and no I/O.
//
// Both the network server (one KvState, driven by one event-loop thread) and HashStore (one
// KvState under a mutex) use it, so the in-process store and the daemon cannot drift apart.
// Whoever blocks on the state (a connection parked in WAIT, a thread in HashStore::wait) is a
// KvObserver; KvState calls it back synchronously from inside the mutation that satisfies it.
//
// Semantics (docs/protocol.md):
//   - values are bytes; add() keeps integers as ASCII decimal and parses like strtoll;
//   - a wait counts the keys missing when it starts and completes when each of them has appeared
//     at least once (appearing and being deleted again still counts);
//   - a queue push wakes only the first waiter of its key (torch's libuv server does the same);
//   - numKeys counts map entries only (queues are not keys).
//
// Not thread-safe: callers serialise access. Observers must call forget() before they go away.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "protocol/wire.h"

namespace ddprun::rendezvous {

class KvObserver {
 public:
  // The wait or barrier registered under `waitId` is satisfied. Called once, then forgotten.
  virtual void onWaitDone(std::uint64_t waitId) = 0;
  // A watched key changed (torch 1.13 WATCH_KEY). `oldValue` is empty for kCreated, `newValue`
  // for kDeleted.
  virtual void onWatchEvent(protocol::WatchEvent event, std::string_view key,
                            std::string_view oldValue, std::string_view newValue);

 protected:
  ~KvObserver() = default;
};

class KvState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // --- reads ---
  // The value of `key`, or nullptr. The pointer is valid until the next mutation.
  const std::string* find(std::string_view key) const;
  // A key exists, or a queue of that name is non-empty (what CHECK and WAIT look for).
  bool present(std::string_view key) const;
  std::size_t numKeys() const { return map_.size(); }
  std::vector<std::string> keys() const;

  // --- writes; each wakes waiters of the key and tells its watchers ---
  void set(std::string_view key, std::string value);
  // c10d compare_set; see Store::compareSet for the exact rules. Returns the reply value.
  std::string compareSet(std::string_view key, std::string_view expected, std::string_view desired);
  // The new value, or nothing when the existing value is not an integer (nothing changes then).
  std::optional<std::int64_t> add(std::string_view key, std::int64_t delta);
  void append(std::string_view key, std::string_view bytes);
  bool erase(std::string_view key);

  // --- queues (torch 2.8+, separate from the key map) ---
  void queuePush(std::string_view key, std::string value);
  // Pops the oldest item. `lengthBefore` receives the queue length before the pop (0: nothing).
  std::optional<std::string> queuePop(std::string_view key, std::int64_t& lengthBefore);
  std::int64_t queueLength(std::string_view key) const;

  // --- blocking ---
  // True when every key is present now; nothing is registered then. Otherwise registers wait
  // `waitId` of `observer`, whose onWaitDone(waitId) runs once every missing key has appeared.
  bool wait(KvObserver* observer, std::uint64_t waitId, const std::vector<std::string>& keys);
  // Enters barrier `key`: adds 1 to its counter. True when the counter has reached `worldSize`
  // (every parked member whose size is reached is released too), false when `observer` is now
  // parked as `waitId`, nothing when the key holds a non-integer.
  std::optional<bool> barrier(KvObserver* observer, std::uint64_t waitId, std::string_view key,
                              std::int64_t worldSize);
  // Drops every pending wait and barrier of `observer`; returns how many there were.
  std::size_t cancelWaits(KvObserver* observer);
  bool hasWaits(const KvObserver* observer) const;
  // Reports every later change of `key` to `observer` until forget().
  void watch(KvObserver* observer, std::string_view key);
  // Drops everything registered for `observer`: waits, watches, and its holds (with notification:
  // for a connection this is how a peer that died announces itself).
  void forget(KvObserver* observer);

  // --- holds (a ddprun extension: liveness without polling) ---
  // `observer` holds `key` at `value`; the key exists while at least one holder remains. A holder
  // that goes away for cause (forget(), or no renewal within `ttl` when ttl > 0) writes
  // `notifyValue` to `notifyKey` unless that key already exists (the first report wins), which
  // wakes whoever WAITs on it. Holding again renews (and may change the notify key). Returns the
  // key's held value: `value` when granted, else the value others hold it at (nothing changes).
  std::string hold(KvObserver* observer, std::string_view key, std::string_view value,
                   std::chrono::milliseconds ttl, std::string_view notifyKey,
                   std::string_view notifyValue, TimePoint now);
  // Drops `observer`'s hold on `key` without notification. True if it held it.
  bool release(KvObserver* observer, std::string_view key);
  // Drops every holder whose time-to-live has passed, with notification.
  void expireHolds(TimePoint now);
  bool hasHolds() const { return !holds_.empty(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <typename V>
  using Map = std::unordered_map<std::string, V, Hash, std::equal_to<>>;

  struct WaitRef {
    KvObserver* observer;
    std::uint64_t waitId;
  };
  struct BarrierRef {
    KvObserver* observer;
    std::uint64_t waitId;
    std::int64_t worldSize;
  };
  struct PendingWait {
    std::size_t missing;
    std::vector<std::string> keys;  // where its WaitRefs are filed, to remove them on cancel
  };
  struct ObserverState {
    std::unordered_map<std::uint64_t, PendingWait> waits;
    std::vector<std::string> barrierKeys;
    std::vector<std::string> watchedKeys;
    std::vector<std::string> heldKeys;
  };
  struct Holder {
    KvObserver* observer;
    TimePoint deadline;  // TimePoint::max() when the hold has no time-to-live
    std::string notifyKey;
    std::string notifyValue;
  };
  struct Hold {
    std::string value;
    std::vector<Holder> holders;
  };

  // Inserts or overwrites, then notifies watchers and waiters.
  void store(std::string_view key, std::string value);
  void wake(std::string_view key, bool onlyFirst);
  void notifyWatchers(protocol::WatchEvent event, std::string_view key, std::string_view oldValue,
                      std::string_view newValue);
  void releaseBarrier(std::string_view key, std::int64_t count);
  // Removes `observer` as a holder of `key`; with `forCause`, reports it to its notify key.
  bool dropHolder(std::string_view key, const KvObserver* observer, bool forCause);
  // Erases an observer's bookkeeping once nothing is registered for it any more.
  void dropIfIdle(std::unordered_map<const KvObserver*, ObserverState>::iterator state);

  Map<std::string> map_;
  Map<std::deque<std::string>> queues_;
  Map<std::vector<WaitRef>> waiters_;
  Map<std::vector<BarrierRef>> barriers_;
  Map<std::vector<KvObserver*>> watchers_;
  Map<Hold> holds_;
  std::unordered_map<const KvObserver*, ObserverState> observers_;
};

// Parses a stored counter the way torch's std::stoll does: leading whitespace and a sign allowed,
// trailing bytes ignored. Nothing if there are no digits or the number does not fit in int64.
std::optional<std::int64_t> parseCounter(const std::string& text);

}  // namespace ddprun::rendezvous
