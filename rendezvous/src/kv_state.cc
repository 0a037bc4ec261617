#include "kv_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

namespace ddprun::rendezvous {

using protocol::WatchEvent;

void KvObserver::onWatchEvent(WatchEvent, std::string_view, const ValueRef&, const ValueRef&) {}

std::optional<std::int64_t> parseCounter(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(begin, &end, 10);
  if (end == begin || errno == ERANGE) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

KvState::KvState() = default;
KvState::~KvState() = default;

const std::string* KvState::find(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second.value->bytes;
}

ValueRef KvState::share(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : ValueRef(it->second.value);
}

bool KvState::present(std::string_view key) const {
  if (map_.find(key) != map_.end()) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

std::vector<std::string> KvState::keys() const {
  std::vector<std::string> out;
  out.reserve(map_.size());
  for (const auto& [key, entry] : map_) out.push_back(key);
  return out;
}

std::unique_ptr<KeyListing> KvState::listKeys() {
  std::unique_ptr<KeyListing> listing(new KeyListing(*this, map_.size(), keyBytes_));
  if (newest_ != nullptr) {
    listing->cursor_ = oldest_;
    listing->lastOrder_ = newest_->second.order;
  }
  listings_.push_back(listing.get());
  return listing;
}

KvState::PrefixListing KvState::listPrefix(std::string_view prefix, std::size_t maxKeys,
                                           std::size_t maxBytes) const {
  PrefixListing listing;
  std::size_t bytes = 0;
  for (auto it = index_.lower_bound(prefix); it != index_.end() && it->starts_with(prefix); ++it) {
    if (listing.keys.size() >= maxKeys ||
        (!listing.keys.empty() && bytes + it->size() > maxBytes)) {
      listing.more = true;
      break;
    }
    bytes += it->size();
    listing.keys.emplace_back(*it);
  }
  return listing;
}

std::size_t KvState::growthOfSet(std::string_view key, std::size_t valueBytes) const {
  const std::string* existing = find(key);
  if (existing == nullptr) return key.size() + valueBytes + kEntryOverhead;
  return valueBytes > existing->size() ? valueBytes - existing->size() : 0;
}

std::size_t KvState::growthOfPush(std::string_view key, std::size_t valueBytes) const {
  const std::size_t item = valueBytes + kQueueItemOverhead;
  return queues_.contains(key) ? item : item + key.size() + kEntryOverhead;
}

std::size_t KvState::growthOfHold(const KvObserver* observer, std::string_view key,
                                  std::string_view value, std::string_view notifyKey,
                                  std::string_view notifyValue) const {
  // Mirrors hold(): what it would create, or grow.
  std::size_t growth = 0;
  auto it = holds_.find(key);
  const Hold* held = nullptr;
  if (it == holds_.end()) {
    const std::string* existing = find(key);
    if (existing != nullptr && *existing != value) return 0;
    growth += key.size() + value.size() + kEntryOverhead;  // the hold itself
    if (existing == nullptr) growth += growthOfSet(key, value.size());
  } else if (it->second.value != value) {
    return 0;
  } else {
    held = &it->second;
  }
  const std::size_t notify = notifyKey.size() + notifyValue.size() + kEntryOverhead;
  if (held != nullptr) {
    auto mine = std::find_if(held->holders.begin(), held->holders.end(),
                             [observer](const Holder& h) { return h.observer == observer; });
    if (mine != held->holders.end()) {
      const std::size_t before = holderBytes(*mine);
      return growth + (notify > before ? notify - before : 0);
    }
  }
  return growth + notify;
}

void KvState::replaceValue(Entry& entry, std::string value) {
  const std::size_t before = entry.value->bytes.size();
  if (value.size() >= before) {
    grow(value.size() - before);
  } else {
    shrink(before - value.size());
  }
  // Only this state's threads ever copy the pointer (share() on the server's loop, under
  // HashStore's mutex), so a count of one cannot rise meanwhile.
  if (entry.value.use_count() == 1) {
    entry.value->bytes = std::move(value);
  } else {
    detach(entry.value);
    entry.value = std::make_shared<ValueBuffer>(std::move(value));
  }
}

void KvState::detach(const std::shared_ptr<ValueBuffer>& value) {
  if (value.use_count() == 1) return;  // the map's reference was the last: freed with it
  value->detached = detached_;
  detached_->fetch_add(value->bytes.size(), std::memory_order_relaxed);
}

void KvState::store(std::string_view key, std::string value) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    grow(key.size() + value.size() + kEntryOverhead);
    keyBytes_ += key.size();
    it = map_.emplace(std::string(key), Entry{std::make_shared<ValueBuffer>(std::move(value)),
                                              nextOrder_++, nullptr, newest_})
             .first;
    keyCount_.fetch_add(1, std::memory_order_relaxed);
    Slot* slot = &*it;
    index_.insert(std::string_view(slot->first));
    if (newest_ != nullptr) {
      newest_->second.newer = slot;
    } else {
      oldest_ = slot;
    }
    newest_ = slot;
    if (!watchers_.empty()) notifyWatchers(WatchEvent::kCreated, key, nullptr, it->second.value);
  } else if (!watchers_.empty() && watchers_.contains(key)) {
    const ValueRef old = it->second.value;  // so the new value gets a buffer of its own
    replaceValue(it->second, std::move(value));
    notifyWatchers(WatchEvent::kUpdated, key, old, it->second.value);
  } else {
    replaceValue(it->second, std::move(value));
  }
  wake(key, /*onlyFirst=*/false);
}

void KvState::eraseSlot(Map<Entry>::iterator it) {
  Slot& slot = *it;
  for (KeyListing* listing : listings_) listing->onErase(slot);
  index_.erase(std::string_view(slot.first));
  Entry& entry = slot.second;
  (entry.older != nullptr ? entry.older->second.newer : oldest_) = entry.newer;
  (entry.newer != nullptr ? entry.newer->second.older : newest_) = entry.older;
  shrink(slot.first.size() + entry.value->bytes.size() + kEntryOverhead);
  detach(entry.value);
  keyBytes_ -= slot.first.size();
  map_.erase(it);
  keyCount_.fetch_sub(1, std::memory_order_relaxed);
}

void KvState::set(std::string_view key, std::string value) { store(key, std::move(value)); }

std::string KvState::compareSet(std::string_view key, std::string_view expected,
                                std::string_view desired) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    // c10d: a missing key is created only when the caller expected "no value"; otherwise the
    // reply echoes `expected` (the source calls this lying) and nothing is created.
    if (!expected.empty()) return std::string(expected);
    store(key, std::string(desired));
    return std::string(desired);
  }
  if (it->second.value->bytes != expected) return it->second.value->bytes;
  store(key, std::string(desired));
  return std::string(desired);
}

std::optional<std::int64_t> KvState::add(std::string_view key, std::int64_t delta) {
  auto it = map_.find(key);
  std::int64_t current = 0;
  if (it != map_.end()) {
    std::optional<std::int64_t> parsed = parseCounter(it->second.value->bytes);
    if (!parsed) return std::nullopt;
    current = *parsed;
  }
  // Two's-complement wrap-around, as torch's int64 addition does in practice.
  const auto sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) +
                                             static_cast<std::uint64_t>(delta));
  if (it != map_.end() && watchers_.empty()) {
    // The hot path of every counter: one lookup, no wake-ups.
    replaceValue(it->second, std::to_string(sum));
    wake(key, /*onlyFirst=*/false);
  } else {
    store(key, std::to_string(sum));
  }
  return sum;
}

void KvState::append(std::string_view key, std::string_view bytes) {
  const std::string* existing = find(key);
  std::string value = existing ? *existing : std::string();
  value.append(bytes);
  store(key, std::move(value));
}

bool KvState::erase(std::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  if (!watchers_.empty() && watchers_.contains(key)) {
    const ValueRef old = it->second.value;
    eraseSlot(it);
    notifyWatchers(WatchEvent::kDeleted, key, old, nullptr);
  } else {
    eraseSlot(it);
  }
  return true;
}

KvState::PrefixErasure KvState::erasePrefix(std::string_view prefix, std::size_t maxKeys) {
  // The names first: erasing invalidates the index's iterators (and the views, with the entry).
  const PrefixListing doomed = listPrefix(prefix, maxKeys, static_cast<std::size_t>(-1));
  PrefixErasure result;
  for (const std::string& key : doomed.keys) {
    if (erase(key)) ++result.erased;
  }
  result.more = doomed.more;
  return result;
}

void KvState::queuePush(std::string_view key, std::string value) {
  grow(growthOfPush(key, value.size()));
  auto it = queues_.find(key);
  if (it == queues_.end()) it = queues_.emplace(std::string(key), std::deque<std::string>()).first;
  it->second.push_back(std::move(value));
  wake(key, /*onlyFirst=*/true);
}

std::optional<std::string> KvState::queuePop(std::string_view key, std::int64_t& lengthBefore) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) {
    lengthBefore = 0;
    return std::nullopt;
  }
  lengthBefore = static_cast<std::int64_t>(it->second.size());
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  shrink(value.size() + kQueueItemOverhead);
  if (it->second.empty()) {
    shrink(it->first.size() + kEntryOverhead);
    queues_.erase(it);
  }
  return value;
}

std::int64_t KvState::queueLength(std::string_view key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

std::size_t KvState::queueFrontBytes(std::string_view key) const {
  auto it = queues_.find(key);
  return it == queues_.end() || it->second.empty() ? 0 : it->second.front().size();
}

const std::string* KvState::heldValue(std::string_view key) const {
  auto it = holds_.find(key);
  return it == holds_.end() ? nullptr : &it->second.value;
}

bool KvState::wait(KvObserver* observer, std::uint64_t waitId,
                   const std::vector<std::string>& keys) {
  PendingWait pending{0, {}};
  for (const std::string& key : keys) {
    if (!present(key)) {
      ++pending.missing;
      pending.keys.push_back(key);
      pending.bytes += registrationBytes(key);
    }
  }
  if (pending.missing == 0) return true;
  grow(pending.bytes);
  for (const std::string& key : pending.keys) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) it = waiters_.emplace(key, std::vector<WaitRef>()).first;
    it->second.push_back({observer, waitId});
  }
  observers_[observer].waits.emplace(waitId, std::move(pending));
  return false;
}

void KvState::wake(std::string_view key, bool onlyFirst) {
  if (waiters_.empty()) return;  // the common case: nobody waits on anything
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<WaitRef> woken;
  if (onlyFirst) {
    woken.push_back(it->second.front());
    it->second.erase(it->second.begin());
    if (it->second.empty()) waiters_.erase(it);
  } else {
    woken = std::move(it->second);
    waiters_.erase(it);
  }
  for (const WaitRef& ref : woken) {
    auto state = observers_.find(ref.observer);
    if (state == observers_.end()) continue;
    auto pending = state->second.waits.find(ref.waitId);
    if (pending == state->second.waits.end()) continue;
    if (--pending->second.missing == 0) {
      shrink(pending->second.bytes);
      state->second.waits.erase(pending);
      dropIfIdle(state);
      ref.observer->onWaitDone(ref.waitId);
    }
  }
}

std::optional<bool> KvState::barrier(KvObserver* observer, std::uint64_t waitId,
                                     std::string_view key, std::int64_t worldSize) {
  std::optional<std::int64_t> count = add(key, 1);
  if (!count) return std::nullopt;
  if (*count >= worldSize) {
    releaseBarrier(key, *count);
    return true;
  }
  auto it = barriers_.find(key);
  if (it == barriers_.end())
    it = barriers_.emplace(std::string(key), std::vector<BarrierRef>()).first;
  it->second.push_back({observer, waitId, worldSize});
  observers_[observer].barrierKeys.emplace_back(key);
  grow(registrationBytes(key));
  return false;
}

void KvState::releaseBarrier(std::string_view key, std::int64_t count) {
  auto it = barriers_.find(key);
  if (it == barriers_.end()) return;
  std::vector<BarrierRef> released;
  auto& parked = it->second;
  auto keep = std::partition(parked.begin(), parked.end(),
                             [count](const BarrierRef& ref) { return ref.worldSize > count; });
  released.assign(keep, parked.end());
  parked.erase(keep, parked.end());
  if (parked.empty()) barriers_.erase(it);
  for (const BarrierRef& ref : released) {
    auto state = observers_.find(ref.observer);
    if (state != observers_.end()) {
      auto& keys = state->second.barrierKeys;
      if (auto k = std::find(keys.begin(), keys.end(), key); k != keys.end()) {
        keys.erase(k);
        shrink(registrationBytes(key));
      }
      dropIfIdle(state);
    }
    ref.observer->onWaitDone(ref.waitId);
  }
}

std::size_t KvState::cancelWaits(KvObserver* observer) {
  auto state = observers_.find(observer);
  if (state == observers_.end()) return 0;
  std::size_t cancelled = 0;
  auto dropRefs = [observer](auto& lists, const std::string& key) {
    auto it = lists.find(key);
    if (it == lists.end()) return;
    std::erase_if(it->second, [observer](const auto& ref) { return ref.observer == observer; });
    if (it->second.empty()) lists.erase(it);
  };
  for (auto& [waitId, pending] : state->second.waits) {
    for (const std::string& key : pending.keys) dropRefs(waiters_, key);
    shrink(pending.bytes);
    ++cancelled;
  }
  state->second.waits.clear();
  for (const std::string& key : state->second.barrierKeys) {
    auto it = barriers_.find(key);
    if (it != barriers_.end()) {
      cancelled += static_cast<std::size_t>(
          std::count_if(it->second.begin(), it->second.end(),
                        [observer](const BarrierRef& ref) { return ref.observer == observer; }));
    }
    dropRefs(barriers_, key);
    shrink(registrationBytes(key));
  }
  state->second.barrierKeys.clear();
  dropIfIdle(state);
  return cancelled;
}

bool KvState::hasWaits(const KvObserver* observer) const {
  auto state = observers_.find(observer);
  return state != observers_.end() &&
         (!state->second.waits.empty() || !state->second.barrierKeys.empty());
}

void KvState::dropIfIdle(std::unordered_map<const KvObserver*, ObserverState>::iterator state) {
  const ObserverState& s = state->second;
  if (s.waits.empty() && s.barrierKeys.empty() && s.watchedKeys.empty() && s.heldKeys.empty()) {
    observers_.erase(state);
  }
}

void KvState::watch(KvObserver* observer, std::string_view key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end())
    it = watchers_.emplace(std::string(key), std::vector<KvObserver*>()).first;
  it->second.push_back(observer);
  observers_[observer].watchedKeys.emplace_back(key);
  grow(registrationBytes(key));
}

void KvState::notifyWatchers(WatchEvent event, std::string_view key, const ValueRef& oldValue,
                             const ValueRef& newValue) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  // Iterate over a copy: a watcher whose write fails (or who lags too far behind) closes from
  // inside onWatchEvent and forget()s itself, which edits, and may erase, this very list. The
  // copy is checked against the live list so that a watcher forgotten meanwhile, whose object
  // may be gone, is not called.
  const std::vector<KvObserver*> snapshot = it->second;
  for (KvObserver* observer : snapshot) {
    it = watchers_.find(key);
    if (it == watchers_.end()) return;
    if (std::find(it->second.begin(), it->second.end(), observer) == it->second.end()) continue;
    observer->onWatchEvent(event, key, oldValue, newValue);
  }
}

void KvState::forget(KvObserver* observer) {
  cancelWaits(observer);
  auto state = observers_.find(observer);
  if (state == observers_.end()) return;
  // Copy: dropHolder() edits the list, and notifications may touch the observers map.
  const std::vector<std::string> held = state->second.heldKeys;
  for (const std::string& key : held) dropHolder(key, observer, /*forCause=*/true);
  state = observers_.find(observer);
  if (state == observers_.end()) return;
  for (const std::string& key : state->second.watchedKeys) {
    shrink(registrationBytes(key));
    auto it = watchers_.find(key);
    if (it == watchers_.end()) continue;
    std::erase(it->second, observer);
    if (it->second.empty()) watchers_.erase(it);
  }
  observers_.erase(state);
}

std::string KvState::hold(KvObserver* observer, std::string_view key, std::string_view value,
                          std::chrono::milliseconds ttl, std::string_view notifyKey,
                          std::string_view notifyValue, TimePoint now) {
  auto it = holds_.find(key);
  if (it == holds_.end()) {
    // Not held yet: a plain key of another value belongs to someone else.
    if (const std::string* existing = find(key); existing && *existing != value) return *existing;
    grow(key.size() + value.size() + kEntryOverhead);
    it = holds_.emplace(std::string(key), Hold{std::string(value), {}}).first;
    if (find(key) == nullptr) store(key, std::string(value));
  } else if (it->second.value != value) {
    return it->second.value;
  }
  const TimePoint deadline = ttl.count() > 0 ? now + ttl : TimePoint::max();
  auto& holders = it->second.holders;
  auto mine = std::find_if(holders.begin(), holders.end(),
                           [observer](const Holder& h) { return h.observer == observer; });
  if (mine == holders.end()) {
    holders.push_back({observer, deadline, std::string(notifyKey), std::string(notifyValue)});
    grow(holderBytes(holders.back()));
    observers_[observer].heldKeys.emplace_back(key);
  } else {
    shrink(holderBytes(*mine));
    mine->deadline = deadline;
    mine->notifyKey = notifyKey;
    mine->notifyValue = notifyValue;
    grow(holderBytes(*mine));
  }
  return it->second.value;
}

bool KvState::release(KvObserver* observer, std::string_view key) {
  return dropHolder(key, observer, /*forCause=*/false);
}

bool KvState::dropHolder(std::string_view key, const KvObserver* observer, bool forCause) {
  auto it = holds_.find(key);
  if (it == holds_.end()) return false;
  auto& holders = it->second.holders;
  auto mine = std::find_if(holders.begin(), holders.end(),
                           [observer](const Holder& h) { return h.observer == observer; });
  if (mine == holders.end()) return false;
  const Holder gone = *mine;
  holders.erase(mine);
  // Released before the notify key is written below: what it reserved is what that write takes.
  shrink(holderBytes(gone));
  if (auto state = observers_.find(observer); state != observers_.end()) {
    auto& keys = state->second.heldKeys;
    if (auto k = std::find(keys.begin(), keys.end(), key); k != keys.end()) keys.erase(k);
    dropIfIdle(state);
  }
  const std::string value = it->second.value;
  if (holders.empty()) {
    shrink(it->first.size() + value.size() + kEntryOverhead);
    holds_.erase(it);
    if (const std::string* current = find(key); current && *current == value) erase(key);
  }
  // Report after the key is gone, so that a woken reader already sees it missing.
  if (forCause && !gone.notifyKey.empty() && !present(gone.notifyKey)) {
    store(gone.notifyKey, gone.notifyValue);
  }
  return true;
}

void KvState::postponeHolds(std::chrono::steady_clock::duration by) {
  for (auto& [key, held] : holds_) {
    for (Holder& holder : held.holders) {
      if (holder.deadline != TimePoint::max()) holder.deadline += by;
    }
  }
}

void KvState::expireHolds(TimePoint now) {
  std::vector<std::pair<std::string, const KvObserver*>> expired;
  for (const auto& [key, held] : holds_) {
    for (const Holder& holder : held.holders) {
      if (holder.deadline <= now) expired.emplace_back(key, holder.observer);
    }
  }
  for (const auto& [key, observer] : expired) dropHolder(key, observer, /*forCause=*/true);
}

}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {

KeyListing::KeyListing(KvState& kv, std::size_t size, std::size_t keyBytes)
    : kv_(kv), size_(size), remainingCount_(size), remainingKeyBytes_(keyBytes) {}

KeyListing::~KeyListing() { std::erase(kv_.listings_, this); }

std::optional<std::size_t> KeyListing::nextSize() const {
  if (cursor_ != nullptr) return cursor_->first.size();
  if (!erasedNames_.empty()) return erasedNames_.back().size();
  return std::nullopt;
}

std::optional<std::string_view> KeyListing::next() {
  std::string_view name;
  if (cursor_ != nullptr) {
    name = cursor_->first;
    cursor_ = cursor_->second.newer;
    if (cursor_ != nullptr && cursor_->second.order > lastOrder_) cursor_ = nullptr;
  } else if (!erasedNames_.empty()) {
    current_ = std::move(erasedNames_.back());
    erasedNames_.pop_back();
    name = current_;
  } else {
    return std::nullopt;
  }
  --remainingCount_;
  remainingKeyBytes_ -= name.size();
  return name;
}

void KeyListing::onErase(const KvState::Slot& slot) {
  // Still to come: at or after the cursor (orders grow along the walk) and of the snapshot.
  if (cursor_ == nullptr || slot.second.order < cursor_->second.order ||
      slot.second.order > lastOrder_) {
    return;
  }
  erasedNames_.push_back(slot.first);
  if (cursor_ == &slot) {
    cursor_ = slot.second.newer;
    if (cursor_ != nullptr && cursor_->second.order > lastOrder_) cursor_ = nullptr;
  }
}

}  // namespace ddprun::rendezvous
