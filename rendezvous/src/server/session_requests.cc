// Session's request handlers: one per request kind, and handle(), which picks one.
#include <fmt/format.h>

#include <algorithm>

#include "ddprun/common/shown_key.h"
#include "ddprun/rendezvous/store.h"
#include "server/session.h"

namespace ddprun::rendezvous {

using protocol::Op;
using protocol::Request;

template <typename Growth>
bool Session::fitsStore(std::size_t upperBound, const Growth& exactGrowth, std::string_view op,
                        std::string_view key) {
  const std::size_t budget = context_.options.maxStoredBytes;
  const std::size_t stored = context_.kv.storedBytes();
  // The bound needs no lookup; the exact growth is worked out only near the budget.
  if (stored <= budget && upperBound <= budget - stored) return true;
  const std::size_t growth = exactGrowth();
  if (stored <= budget && growth <= budget - stored) return true;
  close(fmt::format("{} of key {} would take the stored data to {} bytes, over the {}-byte "
                    "budget (ddprun-rendezvous --max-stored-bytes sets it)",
                    op, common::shownKey(key), stored + growth, budget),
        /*isError=*/true);
  return false;
}

void Session::cancelTimedOutWaits() {
  if (*decoder_.dialect() != WireDialect::kTorch113 || !context_.kv.hasWaits(this)) return;
  // A 1.13 client is strictly request/response, so a new request while its WAIT is parked means
  // the WAIT timed out on the client side. 1.13 has no CANCEL_WAIT: without this, the late
  // STOP_WAITING would be read as the reply to this request and the connection would be
  // desynchronised for good (torch's own server does exactly that).
  context_.kv.cancelWaits(this);
}

bool Session::handle(Request& request) {
  cancelTimedOutWaits();
  context_.operations[static_cast<std::size_t>(request.op)].fetch_add(1, std::memory_order_relaxed);
  switch (request.op) {
    case Op::kValidate:
      return handleValidate(request);
    case Op::kSet:
      return handleSet(request);
    case Op::kCompareSet:
      return handleCompareSet(request);
    case Op::kGet:
      return handleGet(request);
    case Op::kAdd:
      return handleAdd(request);
    case Op::kCheck:
      return handleCheck(request);
    case Op::kWait:
      return handleWait(request);
    case Op::kNumKeys:
      return handleNumKeys();
    case Op::kWatchKey:
      return handleWatchKey(request);
    case Op::kDeleteKey:
      return handleDeleteKey(request);
    case Op::kAppend:
      return handleAppend(request);
    case Op::kMultiGet:
      return handleMultiGet(request);
    case Op::kMultiSet:
      return handleMultiSet(request);
    case Op::kCancelWait:
      return handleCancelWait();
    case Op::kPing:
      return handlePing(request);
    case Op::kQueuePush:
      return handleQueuePush(request);
    case Op::kQueuePop:
      return handleQueuePop(request);
    case Op::kQueueLen:
      return handleQueueLen(request);
    case Op::kListKeys:
      return handleListKeys();
    case Op::kHold:
      return handleHold(request);
    case Op::kRelease:
      return handleRelease(request);
    case Op::kListPrefix:
      return handleListPrefix(request);
    case Op::kDeletePrefix:
      return handleDeletePrefix(request);
    case Op::kBarrier:
      return handleBarrier(request);
  }
  return true;
}

// Connection and counters.

bool Session::handleValidate(const Request& request) {
  if (request.word != protocol::kValidationMagic) {
    close(fmt::format("VALIDATE with wrong magic 0x{:08x}", request.word), /*isError=*/true);
    return false;
  }
  return true;
}

bool Session::handlePing(const Request& request) {
  protocol::putU32(pending_.bytes(), request.word);
  return true;
}

bool Session::handleNumKeys() {
  protocol::putI64(pending_.bytes(), static_cast<std::int64_t>(context_.kv.numKeys()));
  return true;
}

// Writes: each is first held to maxStoredBytes (fitsStore).

bool Session::handleSet(Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  const std::size_t bytes = request.values[0].size();
  if (!fitsStore(
          key.size() + bytes + KvState::kEntryOverhead, [&] { return kv.growthOfSet(key, bytes); },
          "SET", key)) {
    return false;
  }
  kv.set(key, std::move(request.values[0]));
  return true;
}

bool Session::handleCompareSet(const Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  const std::string& expected = request.values[0];
  const std::string& desired = request.values[1];
  const auto growth = [&]() -> std::size_t {
    const std::string* existing = kv.find(key);
    const bool stores = existing ? *existing == expected : expected.empty();
    return stores ? kv.growthOfSet(key, desired.size()) : 0;
  };
  if (!fitsStore(key.size() + desired.size() + KvState::kEntryOverhead, growth, "COMPARE_SET",
                 key)) {
    return false;
  }
  protocol::putBlob(pending_.bytes(), kv.compareSet(key, expected, desired));
  return true;
}

bool Session::handleAdd(const Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  if (!fitsStore(
          key.size() + KvState::kMaxCounterBytes + KvState::kEntryOverhead,
          [&] { return kv.growthOfSet(key, KvState::kMaxCounterBytes); }, "ADD", key)) {
    return false;
  }
  const auto value = kv.add(key, request.integer);
  if (!value) {
    close(fmt::format("ADD on key {} whose value is not an integer",
                      common::shownKey(request.keys[0])),
          /*isError=*/true);
    return false;
  }
  protocol::putI64(pending_.bytes(), *value);
  return true;
}

bool Session::handleAppend(const Request& request) {
  auto& kv = context_.kv;
  // Every stored value stays within the value limit, so that a single-value reply (GET,
  // COMPARE_SET, ...) is bounded by the limits too, whatever was appended before.
  const std::string& key = request.keys[0];
  const std::string* existing = kv.find(key);
  const std::size_t total = (existing ? existing->size() : 0) + request.values[0].size();
  if (total > context_.options.limits.maxValueBytes) {
    close(fmt::format("APPEND to key {} would make a {}-byte value, over the {}-byte limit",
                      common::shownKey(key), total, context_.options.limits.maxValueBytes),
          /*isError=*/true);
    return false;
  }
  const std::size_t growth =
      existing ? request.values[0].size() : key.size() + total + KvState::kEntryOverhead;
  if (!fitsStore(
          growth, [growth] { return growth; }, "APPEND", key))
    return false;
  kv.append(key, request.values[0]);
  return true;
}

bool Session::handleMultiSet(Request& request) {
  auto& kv = context_.kv;
  // A key named twice counts twice: an overestimate, so the budget still holds.
  std::size_t bound = 0;
  for (std::size_t i = 0; i < request.keys.size(); ++i) {
    bound += request.keys[i].size() + request.values[i].size() + KvState::kEntryOverhead;
  }
  const auto growth = [&] {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < request.keys.size(); ++i) {
      sum += kv.growthOfSet(request.keys[i], request.values[i].size());
    }
    return sum;
  };
  if (!fitsStore(bound, growth, "MULTI_SET",
                 request.keys.empty() ? std::string_view() : request.keys[0])) {
    return false;
  }
  for (std::size_t i = 0; i < request.keys.size(); ++i) {
    kv.set(request.keys[i], std::move(request.values[i]));
  }
  return true;
}

bool Session::handleDeleteKey(const Request& request) {
  protocol::putI64(pending_.bytes(), context_.kv.erase(request.keys[0]) ? 1 : 0);
  return true;
}

bool Session::handleDeletePrefix(const Request& request) {
  // A batch per request, the client asking again while `more`: other connections are served
  // between batches, so wiping a large prefix never stops the server for its whole length.
  const auto erased = context_.kv.erasePrefix(request.keys[0], Store::kMaxListedKeys);
  std::string& out = pending_.bytes();
  protocol::putI64(out, static_cast<std::int64_t>(erased.erased));
  protocol::putU8(out, erased.more ? 1 : 0);
  return true;
}

// Reads.

bool Session::handleGet(const Request& request) {
  ValueRef value = context_.kv.share(request.keys[0]);
  if (value == nullptr && *decoder_.dialect() == WireDialect::kTorch113) {
    // torch 1.13's server drops the connection here; its clients always WAIT first.
    close(fmt::format("GET of missing key {}", common::shownKey(request.keys[0])),
          /*isError=*/false);
    return false;
  }
  pending_.appendBlob(value);  // a large value by reference: a later write cannot change it
  return true;
}

bool Session::handleCheck(const Request& request) {
  const auto& kv = context_.kv;
  const bool ready = std::all_of(request.keys.begin(), request.keys.end(),
                                 [&kv](const std::string& key) { return kv.present(key); });
  protocol::putU8(pending_.bytes(), ready ? protocol::kCheckReady : protocol::kCheckNotReady);
  return true;
}

bool Session::handleMultiGet(Request& request) {
  const auto& kv = context_.kv;
  // One reply is held to the per-connection limit, sized before anything is produced: a few
  // hundred bytes naming one large value many times could otherwise ask for 128 Ki times the
  // value limit (slices bound the memory that costs, not the time and bandwidth).
  std::uint64_t replyBytes = 0;
  for (const std::string& key : request.keys) {
    const std::string* value = kv.find(key);
    replyBytes += 8 + (value ? value->size() : 0);
  }
  if (replyBytes > context_.options.maxPendingReplyBytes) {
    close(fmt::format("MULTI_GET of {} keys would need a {}-byte reply, over the {}-byte "
                      "pending-reply limit",
                      request.keys.size(), replyBytes, context_.options.maxPendingReplyBytes),
          /*isError=*/true);
    return false;
  }
  // Produced a slice per turn from here (serveBuffered), the first one right away.
  sliced_ = SlicedReply::multiGet(std::move(request.keys));
  return true;
}

bool Session::handleListKeys() {
  // The count first, then the names a slice per turn: the listing is a snapshot of this
  // moment, so the two agree whatever other clients write meanwhile.
  std::unique_ptr<KeyListing> listing = context_.kv.listKeys();
  protocol::putI64(pending_.bytes(), static_cast<std::int64_t>(listing->size()));
  sliced_ = SlicedReply::listKeys(std::move(listing));
  return true;
}

bool Session::handleListPrefix(const Request& request) {
  // One turn: the listing is bounded (Store::kMaxListedKeys names within kMaxListedBytes) and
  // found through the ordered index, so its cost is the reply's, not the store's size.
  const std::uint64_t asked = request.integer < 0 ? 0 : static_cast<std::uint64_t>(request.integer);
  const auto listing = context_.kv.listPrefix(
      request.keys[0],
      static_cast<std::size_t>(std::min<std::uint64_t>(asked, Store::kMaxListedKeys)),
      Store::kMaxListedBytes);
  std::string& out = pending_.bytes();
  protocol::putI64(out, static_cast<std::int64_t>(listing.keys.size()));
  for (const std::string& key : listing.keys) protocol::putBlob(out, key);
  protocol::putU8(out, listing.more ? 1 : 0);
  return true;
}

// Queues.

bool Session::handleQueuePush(Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  const std::size_t bytes = request.values[0].size();
  if (!fitsStore(
          key.size() + bytes + KvState::kEntryOverhead + KvState::kQueueItemOverhead,
          [&] { return kv.growthOfPush(key, bytes); }, "QUEUE_PUSH", key)) {
    return false;
  }
  kv.queuePush(key, std::move(request.values[0]));
  return true;
}

bool Session::handleQueuePop(const Request& request) {
  std::int64_t lengthBefore = 0;
  std::optional<std::string> value = context_.kv.queuePop(request.keys[0], lengthBefore);
  std::string& out = pending_.bytes();
  protocol::putI64(out, lengthBefore);
  if (value) protocol::putBlob(out, *value);
  return true;
}

bool Session::handleQueueLen(const Request& request) {
  protocol::putI64(pending_.bytes(), context_.kv.queueLength(request.keys[0]));
  return true;
}

// Waits, watches and barriers: parked on this session until KvState calls back.

bool Session::handleWait(const Request& request) {
  auto& kv = context_.kv;
  std::size_t bound = 0;  // what parking on every key holds; less when some are present
  for (const std::string& key : request.keys) bound += KvState::registrationBytes(key);
  const std::string_view first =
      request.keys.empty() ? std::string_view() : std::string_view(request.keys.front());
  const auto parked = [&] {  // only the missing keys are parked
    std::size_t bytes = 0;
    for (const std::string& key : request.keys) {
      if (!kv.present(key)) bytes += KvState::registrationBytes(key);
    }
    return bytes;
  };
  if (!fitsStore(bound, parked, "WAIT", first)) return false;
  if (kv.wait(this, ++nextWaitId_, request.keys))
    protocol::putU8(pending_.bytes(), protocol::kStopWaiting);
  return true;
}

bool Session::handleCancelWait() {
  context_.kv.cancelWaits(this);
  protocol::putU8(pending_.bytes(), protocol::kWaitCanceled);
  return true;
}

bool Session::handleWatchKey(const Request& request) {
  const std::size_t bytes = KvState::registrationBytes(request.keys[0]);
  if (!fitsStore(
          bytes, [bytes] { return bytes; }, "WATCH_KEY", request.keys[0]))
    return false;
  context_.kv.watch(this, request.keys[0]);
  protocol::putU8(pending_.bytes(), protocol::kKeyCallbackRegistered);
  return true;
}

bool Session::handleBarrier(const Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  const std::size_t parked = KvState::registrationBytes(key);
  if (!fitsStore(
          key.size() + KvState::kMaxCounterBytes + KvState::kEntryOverhead + parked,
          [&] { return kv.growthOfSet(key, KvState::kMaxCounterBytes) + parked; }, "BARRIER",
          key)) {
    return false;
  }
  const auto released = kv.barrier(this, ++nextWaitId_, key, request.integer);
  if (!released) {
    close(fmt::format("BARRIER on key {} whose value is not an integer",
                      common::shownKey(request.keys[0])),
          /*isError=*/true);
    return false;
  }
  if (*released) protocol::putU8(pending_.bytes(), protocol::kStopWaiting);
  return true;
}

// Holds: a key that exists while its holders renew it (KvState::hold).

bool Session::handleHold(const Request& request) {
  auto& kv = context_.kv;
  const std::string& key = request.keys[0];
  const std::string& value = request.values[0];
  const std::string& notifyKey = request.keys[1];
  const std::string& notifyValue = request.values[1];
  const std::size_t bound = 2 * (key.size() + value.size() + KvState::kEntryOverhead) +
                            notifyKey.size() + notifyValue.size() + KvState::kEntryOverhead;
  if (!fitsStore(
          bound, [&] { return kv.growthOfHold(this, key, value, notifyKey, notifyValue); }, "HOLD",
          key)) {
    return false;
  }
  protocol::putBlob(pending_.bytes(),
                    kv.hold(this, key, value, std::chrono::milliseconds(request.word), notifyKey,
                            notifyValue, Clock::now()));
  return true;
}

bool Session::handleRelease(const Request& request) {
  protocol::putI64(pending_.bytes(), context_.kv.release(this, request.keys[0]) ? 1 : 0);
  return true;
}

}  // namespace ddprun::rendezvous
