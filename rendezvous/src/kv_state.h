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
// It counts what it holds (storedBytes()), incrementally, so that a server can keep the data
// within a budget: it asks what a write would add (growthOf...) before making it.
//
// Not thread-safe: callers serialise access (storedBytes() excepted: any thread may read it).
// Observers must call forget() before they go away, and KeyListings must go before the state.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "protocol/wire.h"

namespace ddprun::rendezvous {

// One stored value, shared by the map and by the replies that send it (a GET of the round's
// world, read by thousands of nodes at once, is one buffer, not thousands of copies). The map
// never changes the bytes of a buffer a reply still holds: a write then gives the key a new
// buffer, and the reply sends the old one whole (the value as of its read, as a copy would).
struct ValueBuffer {
  explicit ValueBuffer(std::string value) : bytes(std::move(value)) {}
  ~ValueBuffer() {
    if (detached) detached->fetch_sub(bytes.size(), std::memory_order_relaxed);
  }
  ValueBuffer(const ValueBuffer&) = delete;
  ValueBuffer& operator=(const ValueBuffer&) = delete;

  std::string bytes;
  // Set when the map let go of the buffer while replies still held it: from then on its bytes are
  // no longer stored data (storedBytes()) but memory the replies hold (KvState::detachedBytes()),
  // until the last of them is written.
  std::shared_ptr<std::atomic<std::size_t>> detached;
};
using ValueRef = std::shared_ptr<const ValueBuffer>;

class KvObserver {
 public:
  // The wait or barrier registered under `waitId` is satisfied. Called once, then forgotten.
  virtual void onWaitDone(std::uint64_t waitId) = 0;
  // A watched key changed (torch 1.13 WATCH_KEY). `oldValue` is null for kCreated, `newValue`
  // for kDeleted. The buffers are the stored ones: an event may hold them (ValueBuffer).
  virtual void onWatchEvent(protocol::WatchEvent event, std::string_view key,
                            const ValueRef& oldValue, const ValueRef& newValue);

 protected:
  ~KvObserver() = default;
};

class KeyListing;

class KvState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // What one stored entry costs besides its bytes: a map node with its key header, its value's
  // pointer and its bucket (about 104 bytes with libstdc++), the value's shared buffer (a control
  // block and a string header: 80 bytes with malloc's header), and its node in the ordered index
  // of names that prefix listings walk (a tree node and a view of the name: 64 bytes), rounded
  // up. Counting it makes a million empty keys cost what they really do instead of nothing.
  static constexpr std::size_t kEntryOverhead = 256;
  // The same for one queue item (a deque slot and its string header).
  static constexpr std::size_t kQueueItemOverhead = 48;
  // The longest value add() writes: "-9223372036854775808".
  static constexpr std::size_t kMaxCounterBytes = 20;
  // What one registration on `key` holds (a parked WAIT's key, a WATCH_KEY, a parked BARRIER):
  // the key twice (the waiters' map and the observer's list) and the bookkeeping. Counted in
  // storedBytes() while registered, so a client that parks waits on huge key lists cannot grow
  // the server past its budget either.
  static std::size_t registrationBytes(std::string_view key) {
    return 2 * key.size() + kEntryOverhead;
  }

  KvState();
  ~KvState();
  KvState(const KvState&) = delete;
  KvState& operator=(const KvState&) = delete;

  // --- reads ---
  // The value of `key`, or nullptr. The pointer is valid until the next mutation.
  const std::string* find(std::string_view key) const;
  // The value of `key` as a shared buffer a reply may hold past later writes, or nullptr.
  ValueRef share(std::string_view key) const;
  // A key exists, or a queue of that name is non-empty (what CHECK and WAIT look for).
  bool present(std::string_view key) const;
  std::size_t numKeys() const { return map_.size(); }
  // numKeys(), safe to read from any thread (a health check's): kept beside the map.
  std::size_t keyCount() const { return keyCount_.load(std::memory_order_relaxed); }
  std::vector<std::string> keys() const;
  // The names of every key as of now, to be taken a few at a time while the state changes (see
  // KeyListing). Cheap: nothing is copied up front.
  std::unique_ptr<KeyListing> listKeys();
  // The names that start with `prefix`, in byte order: at most `maxKeys`, and at most `maxBytes`
  // of names unless the first alone is longer; `more` when further names match. Costs a lookup
  // in the ordered index and the names returned, whatever the size of the state.
  struct PrefixListing {
    std::vector<std::string> keys;
    bool more = false;
  };
  PrefixListing listPrefix(std::string_view prefix, std::size_t maxKeys,
                           std::size_t maxBytes) const;

  // --- what the data costs ---
  // Bytes held for the data: every key and value, every queue's name and items, every hold and
  // the notify key and value its holder leaves behind (they become data when it goes), each
  // entry with its overhead. Kept incrementally; safe to read from any thread.
  std::size_t storedBytes() const { return storedBytes_.load(std::memory_order_relaxed); }
  // Bytes of values that were overwritten or erased while replies held them (share()): alive
  // until those replies are written, and no longer counted in storedBytes(). A server counts them
  // with the replies' own bytes against its reply budget. Safe to read from any thread.
  std::size_t detachedBytes() const { return detached_->load(std::memory_order_relaxed); }
  // How much storedBytes() would grow if `key` were set to a value of `valueBytes` bytes (0 when
  // it would not grow).
  std::size_t growthOfSet(std::string_view key, std::size_t valueBytes) const;
  // ... if `valueBytes` were pushed to queue `key`.
  std::size_t growthOfPush(std::string_view key, std::size_t valueBytes) const;
  // ... if hold() were called with these arguments (0 when it would be refused).
  std::size_t growthOfHold(const KvObserver* observer, std::string_view key, std::string_view value,
                           std::string_view notifyKey, std::string_view notifyValue) const;

  // --- writes; each wakes waiters of the key and tells its watchers ---
  void set(std::string_view key, std::string value);
  // c10d compare_set; see Store::compareSet for the exact rules. Returns the reply value.
  std::string compareSet(std::string_view key, std::string_view expected, std::string_view desired);
  // The new value, or nothing when the existing value is not an integer (nothing changes then).
  std::optional<std::int64_t> add(std::string_view key, std::int64_t delta);
  void append(std::string_view key, std::string_view bytes);
  bool erase(std::string_view key);
  // Erases the first `maxKeys` keys (in byte order) whose names start with `prefix`, each as
  // erase() does; returns how many, and whether further keys match.
  struct PrefixErasure {
    std::size_t erased = 0;
    bool more = false;
  };
  PrefixErasure erasePrefix(std::string_view prefix, std::size_t maxKeys);

  // --- queues (torch 2.8+, separate from the key map) ---
  void queuePush(std::string_view key, std::string value);
  // Pops the oldest item. `lengthBefore` receives the queue length before the pop (0: nothing).
  std::optional<std::string> queuePop(std::string_view key, std::int64_t& lengthBefore);
  std::int64_t queueLength(std::string_view key) const;
  // The size of the item queuePop() would return (0 when there is none).
  std::size_t queueFrontBytes(std::string_view key) const;

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
  // Moves every holder's deadline on by `by`: time the server could not run (its process was
  // stopped, its host suspended) is time no holder could renew in, and not theirs to lose.
  void postponeHolds(std::chrono::steady_clock::duration by);
  // The value `key` is held at, or nullptr when nobody holds it.
  const std::string* heldValue(std::string_view key) const;
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
    std::size_t bytes = 0;          // registrationBytes of its keys, counted while it waits
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
  // A map element. Its address is stable until it is erased (unordered_map never moves nodes),
  // which is what lets the entries form a list in insertion order for KeyListing to walk.
  struct Entry;
  using Slot = std::pair<const std::string, Entry>;
  struct Entry {
    // Never null. Changed in place while nothing else holds it (the counters' hot path makes no
    // allocation), replaced by a new buffer when a reply does.
    std::shared_ptr<ValueBuffer> value;
    std::uint64_t order = 0;  // insertion number: increasing from oldest_ to newest_
    Slot* newer = nullptr;
    Slot* older = nullptr;
  };
  friend class KeyListing;

  // Inserts or overwrites, then notifies watchers and waiters.
  void store(std::string_view key, std::string value);
  // Overwrites an entry's value, keeping storedBytes() right.
  void replaceValue(Entry& entry, std::string value);
  // The map is letting go of `value`: if a reply still holds it, its bytes move from
  // storedBytes() to detachedBytes().
  void detach(const std::shared_ptr<ValueBuffer>& value);
  // Removes an entry from the insertion list (telling the listings in progress) and the map.
  void eraseSlot(Map<Entry>::iterator it);
  void grow(std::size_t bytes) { storedBytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void shrink(std::size_t bytes) { storedBytes_.fetch_sub(bytes, std::memory_order_relaxed); }
  static std::size_t holderBytes(const Holder& holder) {
    return holder.notifyKey.size() + holder.notifyValue.size() + kEntryOverhead;
  }
  void wake(std::string_view key, bool onlyFirst);
  void notifyWatchers(protocol::WatchEvent event, std::string_view key, const ValueRef& oldValue,
                      const ValueRef& newValue);
  void releaseBarrier(std::string_view key, std::int64_t count);
  // Removes `observer` as a holder of `key`; with `forCause`, reports it to its notify key.
  bool dropHolder(std::string_view key, const KvObserver* observer, bool forCause);
  // Erases an observer's bookkeeping once nothing is registered for it any more.
  void dropIfIdle(std::unordered_map<const KvObserver*, ObserverState>::iterator state);

  Map<Entry> map_;
  // map_'s names in byte order, for prefix listings and deletions: views of the map's own keys
  // (a node's key never moves), added and removed with their entries.
  std::set<std::string_view> index_;
  Slot* oldest_ = nullptr;
  Slot* newest_ = nullptr;
  std::uint64_t nextOrder_ = 0;
  std::size_t keyBytes_ = 0;           // the names of map_'s keys, for KeyListing
  std::vector<KeyListing*> listings_;  // in progress
  std::atomic<std::size_t> storedBytes_{0};
  // Shared with the detached buffers, which may outlive the state (a reply's last reference).
  std::shared_ptr<std::atomic<std::size_t>> detached_ =
      std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<std::size_t> keyCount_{0};  // map_.size(), for keyCount()
  Map<std::deque<std::string>> queues_;
  Map<std::vector<WaitRef>> waiters_;
  Map<std::vector<BarrierRef>> barriers_;
  Map<std::vector<KvObserver*>> watchers_;
  Map<Hold> holds_;
  std::unordered_map<const KvObserver*, ObserverState> observers_;
};

// The key names of one moment, taken a few at a time across event-loop turns while the state keeps
// changing (a LIST_KEYS reply over a million keys must not stop the server for its whole length).
//
// What it yields is a snapshot: exactly the keys that existed when KvState::listKeys() made it,
// each once, whatever happens meanwhile. A key created later is not listed; a key erased before
// its turn is still listed (its name is copied when it is erased); overwriting values changes
// nothing. So size() (the count a LIST_KEYS reply starts with) and the names always agree. Nothing
// is copied up front: the listing walks the entries in insertion order, stopping at the newest
// entry of its moment.
class KeyListing {
 public:
  ~KeyListing();
  KeyListing(const KeyListing&) = delete;
  KeyListing& operator=(const KeyListing&) = delete;

  // How many names the listing yields in all.
  std::size_t size() const { return size_; }
  // The bytes the names not yet taken need as wire blobs (8-byte length + the name each).
  std::size_t remainingBlobBytes() const { return remainingCount_ * 8 + remainingKeyBytes_; }
  // The length of the name next() yields, or nothing when all have been taken.
  std::optional<std::size_t> nextSize() const;
  // The next name, or nothing when all have been taken. The view is valid until the next call
  // or the next change to the state.
  std::optional<std::string_view> next();

 private:
  friend class KvState;
  KeyListing(KvState& kv, std::size_t size, std::size_t keyBytes);
  // `slot` is about to be erased: keep its name if it is still to come.
  void onErase(const KvState::Slot& slot);

  KvState& kv_;
  std::size_t size_;
  std::size_t remainingCount_;
  std::size_t remainingKeyBytes_;
  std::uint64_t lastOrder_ = 0;            // the newest entry of the snapshot's moment
  const KvState::Slot* cursor_ = nullptr;  // the next entry to yield; nullptr when walked
  std::vector<std::string> erasedNames_;   // snapshot keys erased before their turn
  std::string current_;                    // the erased name last yielded
};

// Parses a stored counter the way torch's std::stoll does: leading whitespace and a sign allowed,
// trailing bytes ignored. Nothing if there are no digits or the number does not fit in int64.
std::optional<std::int64_t> parseCounter(const std::string& text);

}  // namespace ddprun::rendezvous
