#include "server/session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "ddprun/common/shown_key.h"
#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

using protocol::Op;
using protocol::Request;

namespace {

constexpr std::size_t kInitialReadBuffer = 2 * 1024;
constexpr std::size_t kMaxReadBuffer = 256 * 1024;
// Reply buffers that grew past this (a large GET) are released once written, so that a
// connection that once fetched 8 MiB does not keep 8 MiB for its lifetime.
constexpr std::size_t kRetainedWriteBuffer = 256 * 1024;
// A connection whose peer has read everything still gets replies up to this size (every reply but
// a large value or a slice) when the total of unsent replies is at its budget, so that clients
// that read their replies are served whatever the others do.
constexpr std::size_t kSmallReplyBytes = 64 * 1024;

}  // namespace

Session::Session(boost::asio::ip::tcp::socket socket, std::string peer, ServerContext& context)
    : socket_(std::move(socket)),
      peer_(std::move(peer)),
      context_(context),
      decoder_(context.options.limits),
      readBuffer_(kInitialReadBuffer),
      lastReadAt_(Clock::now()) {}

void Session::admit(boost::asio::ip::tcp::socket socket, std::string peer,
                    ServerContext& context) {
  auto session = std::make_shared<Session>(std::move(socket), std::move(peer), context);
  context.sessions.emplace(session.get(), session);
  session->start();
}

void Session::start() {
  // Non-blocking for flush()'s direct writes: a full socket buffer must not block the loop.
  boost::system::error_code ignored;
  socket_.non_blocking(true, ignored);
  readMore();
}

void Session::readMore() {
  if (closed_ || reading_) return;
  // Grown only here, with nothing buffered and no read in flight: the buffer a read was given
  // must stay where it is until that read completes.
  if (growReadBuffer_ && readBuffer_.size() < kMaxReadBuffer) {
    readBuffer_.resize(readBuffer_.size() * 2);
  }
  growReadBuffer_ = false;
  reading_ = true;
  socket_.async_read_some(
      boost::asio::buffer(readBuffer_),
      [self = shared_from_this()](const boost::system::error_code& error, std::size_t bytes) {
        self->onRead(error, bytes);
      });
}

void Session::onRead(const boost::system::error_code& error, std::size_t bytes) {
  reading_ = false;
  if (closed_) return;
  if (error) {
    if (error == boost::asio::error::eof) {
      close(decoder_.midRequest() ? "disconnected in the middle of a request" : "disconnected",
            /*isError=*/false);
    } else if (error != boost::asio::error::operation_aborted) {
      close(error.message(), /*isError=*/false);
    }
    return;
  }
  lastReadAt_ = Clock::now();
  readBegin_ = 0;
  readEnd_ = bytes;
  // A read that filled the buffer suggests a large request or a pipelined burst: read more per call.
  growReadBuffer_ = bytes == readBuffer_.size();
  serve();
}

void Session::serve() {
  if (closed_ || processing_ || continuing_) return;
  blocked_ = false;
  int slicesThisTurn = 0;
  Stop stop = Stop::kInputDone;
  for (;;) {
    stop = serveBuffered(slicesThisTurn);
    if (closed_) return;
    flush();
    if (closed_) return;
    // flush() may have handed much to the kernel, making room; a write completion would come
    // only once the peer reads, so look again now.
    if (stop == Stop::kNoRoom && mayQueue(nextReplyBytes())) continue;
    break;
  }
  switch (stop) {
    case Stop::kInputDone:
      readMore();
      break;
    case Stop::kYield:
      // The other connections' ready handlers run before this one: a large reply costs them
      // one slice of delay, not its whole length.
      continuing_ = true;
      boost::asio::post(socket_.get_executor(), [self = shared_from_this()] {
        self->continuing_ = false;
        self->serve();
      });
      break;
    case Stop::kNoRoom:
      blocked_ = true;
      // With replies waiting, its peer's reading resumes it (onWritten). With none, nothing of
      // its own will: others draining or closing must, through the server-wide list.
      if (replyBytesQueued() == 0 && !onRoomList_) {
        onRoomList_ = true;
        context_.waitingForRoom.push_back(weak_from_this());
        context_.smallestRoomWait = std::min(context_.smallestRoomWait, nextReplyBytes());
      }
      break;
  }
}

Session::Stop Session::serveBuffered(int& slicesThisTurn) {
  processing_ = true;
  Stop stop = Stop::kInputDone;
  auto& kv = context_.kv;
  while (!closed_) {
    if (sliced_) {
      if (slicesThisTurn > 0) {
        stop = Stop::kYield;
        break;
      }
      if (!mayQueue(sliced_->nextSliceBytes(kv))) {
        stop = Stop::kNoRoom;
        break;
      }
      ++slicesThisTurn;
      if (sliced_->appendSlice(pending_, kv)) {
        sliced_.reset();
        pending_.bytes() += deferred_;
        deferred_.clear();
      }
      accountReplies();
      continue;
    }
    if (!requestDecoded_) {
      if (readBegin_ == readEnd_) break;
      const unsigned char* cursor = readBuffer_.data() + readBegin_;
      const auto status = decoder_.decode(cursor, readBuffer_.data() + readEnd_);
      readBegin_ = static_cast<std::size_t>(cursor - readBuffer_.data());
      if (status == protocol::RequestDecoder::Status::kError) {
        close(decoder_.error(), /*isError=*/true);
        break;
      }
      if (status == protocol::RequestDecoder::Status::kNeedMore) continue;
      requestDecoded_ = true;
    }
    // Handled only when its reply fits; until then it waits, with the rest of the buffer.
    if (!mayQueue(replyBytesOf(decoder_.request()))) {
      stop = Stop::kNoRoom;
      break;
    }
    requestDecoded_ = false;
    bool keep;
    try {
      keep = handle(decoder_.request());
    } catch (const std::exception& e) {  // e.g. bad_alloc: costs this connection only
      close(fmt::format("internal error handling {}: {}", opName(decoder_.request().op), e.what()),
            /*isError=*/true);
      keep = false;
    }
    accountReplies();
    if (!keep) break;
  }
  processing_ = false;
  return stop;
}

bool Session::mayQueue(std::size_t bytes) const {
  const auto& options = context_.options;
  const std::size_t queued = replyBytesQueued();
  if (queued > options.maxPendingReplyBytes) return false;
  const std::size_t total = context_.replyMemory();
  const std::size_t budget = options.maxTotalPendingReplyBytes;
  // Connections with replies waiting (peers that may never read them) fill the budget to three
  // quarters only: the last quarter is kept for connections whose peers have read everything.
  if (queued > 0) return total + bytes <= budget - budget / 4;
  // Small replies always go to those, so that a client that reads is served whatever the others
  // hold; and with nothing waiting anywhere, a reply larger than the budget goes out alone.
  return total + bytes <= budget || bytes <= kSmallReplyBytes || total == 0;
}

std::size_t Session::nextReplyBytes() const {
  if (sliced_) return sliced_->nextSliceBytes(context_.kv);
  return requestDecoded_ ? replyBytesOf(decoder_.request()) : 0;
}

std::size_t Session::replyBytesOf(const Request& request) const {
  const auto& kv = context_.kv;
  const auto size = [](const std::string* value) { return value ? value->size() : 0; };
  switch (request.op) {
    case Op::kGet: {  // a large value is referenced, not copied (ReplyQueue::appendBlob)
      const std::size_t bytes = size(kv.find(request.keys[0]));
      return 8 + (bytes < ReplyQueue::kShareMinBytes ? bytes : 0);
    }
    case Op::kCompareSet:  // the current value, `expected` or `desired`
      return 8 + std::max({size(kv.find(request.keys[0])), request.values[0].size(),
                           request.values[1].size()});
    case Op::kQueuePop:
      return 16 + kv.queueFrontBytes(request.keys[0]);
    case Op::kHold:  // the value given, or the one the key is held or stored at
      return 8 + std::max({request.values[0].size(), size(kv.find(request.keys[0])),
                           size(kv.heldValue(request.keys[0]))});
    case Op::kListPrefix: {  // at most: the count, a length per name, the names, the flag
      const std::uint64_t asked = request.integer < 0 ? 0 : static_cast<std::uint64_t>(request.integer);
      const std::size_t names = static_cast<std::size_t>(std::min<std::uint64_t>(asked, Store::kMaxListedKeys));
      return 9 + names * 8 + Store::kMaxListedBytes;
    }
    default:  // a count, a code or a nonce; MULTI_GET and LIST_KEYS are admitted a slice at a time
      return 16;
  }
}

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

bool Session::handle(Request& request) {
  const auto dialect = *decoder_.dialect();
  std::string& out = pending_.bytes();
  auto& kv = context_.kv;
  if (dialect == WireDialect::kTorch113 && kv.hasWaits(this)) {
    // A 1.13 client is strictly request/response, so a new request while its WAIT is parked means
    // the WAIT timed out on the client side. 1.13 has no CANCEL_WAIT: without this, the late
    // STOP_WAITING would be read as the reply to this request and the connection would be
    // desynchronised for good (torch's own server does exactly that).
    kv.cancelWaits(this);
  }
  switch (request.op) {
    case Op::kValidate:
      if (request.word != protocol::kValidationMagic) {
        close(fmt::format("VALIDATE with wrong magic 0x{:08x}", request.word), /*isError=*/true);
        return false;
      }
      return true;
    case Op::kSet: {
      const std::string& key = request.keys[0];
      const std::size_t bytes = request.values[0].size();
      if (!fitsStore(key.size() + bytes + KvState::kEntryOverhead,
                     [&] { return kv.growthOfSet(key, bytes); }, "SET", key)) {
        return false;
      }
      kv.set(key, std::move(request.values[0]));
      return true;
    }
    case Op::kCompareSet: {
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
      protocol::putBlob(out, kv.compareSet(key, expected, desired));
      return true;
    }
    case Op::kGet: {
      ValueRef value = kv.share(request.keys[0]);
      if (value == nullptr && dialect == WireDialect::kTorch113) {
        // torch 1.13's server drops the connection here; its clients always WAIT first.
        close(fmt::format("GET of missing key {}", common::shownKey(request.keys[0])),
              /*isError=*/false);
        return false;
      }
      pending_.appendBlob(value);  // a large value by reference: a later write cannot change it
      return true;
    }
    case Op::kAdd: {
      const std::string& key = request.keys[0];
      if (!fitsStore(key.size() + KvState::kMaxCounterBytes + KvState::kEntryOverhead,
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
      protocol::putI64(out, *value);
      return true;
    }
    case Op::kCheck: {
      const bool ready = std::all_of(request.keys.begin(), request.keys.end(),
                                     [&kv](const std::string& key) { return kv.present(key); });
      protocol::putU8(out, ready ? protocol::kCheckReady : protocol::kCheckNotReady);
      return true;
    }
    case Op::kWait: {
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
      if (kv.wait(this, ++nextWaitId_, request.keys)) protocol::putU8(out, protocol::kStopWaiting);
      return true;
    }
    case Op::kNumKeys:
      protocol::putI64(out, static_cast<std::int64_t>(kv.numKeys()));
      return true;
    case Op::kWatchKey: {
      const std::size_t bytes = KvState::registrationBytes(request.keys[0]);
      if (!fitsStore(bytes, [bytes] { return bytes; }, "WATCH_KEY", request.keys[0])) return false;
      kv.watch(this, request.keys[0]);
      protocol::putU8(out, protocol::kKeyCallbackRegistered);
      return true;
    }
    case Op::kDeleteKey:
      protocol::putI64(out, kv.erase(request.keys[0]) ? 1 : 0);
      return true;
    case Op::kAppend: {
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
      const std::size_t growth = existing ? request.values[0].size()
                                          : key.size() + total + KvState::kEntryOverhead;
      if (!fitsStore(growth, [growth] { return growth; }, "APPEND", key)) return false;
      kv.append(key, request.values[0]);
      return true;
    }
    case Op::kMultiGet: {
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
    case Op::kMultiSet: {
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
    case Op::kCancelWait:
      kv.cancelWaits(this);
      protocol::putU8(out, protocol::kWaitCanceled);
      return true;
    case Op::kPing:
      protocol::putU32(out, request.word);
      return true;
    case Op::kQueuePush: {
      const std::string& key = request.keys[0];
      const std::size_t bytes = request.values[0].size();
      if (!fitsStore(key.size() + bytes + KvState::kEntryOverhead + KvState::kQueueItemOverhead,
                     [&] { return kv.growthOfPush(key, bytes); }, "QUEUE_PUSH", key)) {
        return false;
      }
      kv.queuePush(key, std::move(request.values[0]));
      return true;
    }
    case Op::kQueuePop: {
      std::int64_t lengthBefore = 0;
      std::optional<std::string> value = kv.queuePop(request.keys[0], lengthBefore);
      protocol::putI64(out, lengthBefore);
      if (value) protocol::putBlob(out, *value);
      return true;
    }
    case Op::kQueueLen:
      protocol::putI64(out, kv.queueLength(request.keys[0]));
      return true;
    case Op::kListKeys: {
      // The count first, then the names a slice per turn: the listing is a snapshot of this
      // moment, so the two agree whatever other clients write meanwhile.
      std::unique_ptr<KeyListing> listing = kv.listKeys();
      protocol::putI64(out, static_cast<std::int64_t>(listing->size()));
      sliced_ = SlicedReply::listKeys(std::move(listing));
      return true;
    }
    case Op::kHold: {
      const std::string& key = request.keys[0];
      const std::string& value = request.values[0];
      const std::string& notifyKey = request.keys[1];
      const std::string& notifyValue = request.values[1];
      const std::size_t bound = 2 * (key.size() + value.size() + KvState::kEntryOverhead) +
                                notifyKey.size() + notifyValue.size() + KvState::kEntryOverhead;
      if (!fitsStore(bound, [&] { return kv.growthOfHold(this, key, value, notifyKey, notifyValue); },
                     "HOLD", key)) {
        return false;
      }
      protocol::putBlob(out, kv.hold(this, key, value, std::chrono::milliseconds(request.word),
                                     notifyKey, notifyValue, Clock::now()));
      return true;
    }
    case Op::kRelease:
      protocol::putI64(out, kv.release(this, request.keys[0]) ? 1 : 0);
      return true;
    case Op::kListPrefix: {
      // One turn: the listing is bounded (Store::kMaxListedKeys names within kMaxListedBytes) and
      // found through the ordered index, so its cost is the reply's, not the store's size.
      const std::uint64_t asked = request.integer < 0 ? 0 : static_cast<std::uint64_t>(request.integer);
      const auto listing = kv.listPrefix(
          request.keys[0], static_cast<std::size_t>(std::min<std::uint64_t>(asked, Store::kMaxListedKeys)),
          Store::kMaxListedBytes);
      protocol::putI64(out, static_cast<std::int64_t>(listing.keys.size()));
      for (const std::string& key : listing.keys) protocol::putBlob(out, key);
      protocol::putU8(out, listing.more ? 1 : 0);
      return true;
    }
    case Op::kDeletePrefix: {
      // A batch per request, the client asking again while `more`: other connections are served
      // between batches, so wiping a large prefix never stops the server for its whole length.
      const auto erased = kv.erasePrefix(request.keys[0], Store::kMaxListedKeys);
      protocol::putI64(out, static_cast<std::int64_t>(erased.erased));
      protocol::putU8(out, erased.more ? 1 : 0);
      return true;
    }
    case Op::kBarrier: {
      const std::string& key = request.keys[0];
      const std::size_t parked = KvState::registrationBytes(key);
      if (!fitsStore(key.size() + KvState::kMaxCounterBytes + KvState::kEntryOverhead + parked,
                     [&] { return kv.growthOfSet(key, KvState::kMaxCounterBytes) + parked; },
                     "BARRIER", key)) {
        return false;
      }
      const auto released = kv.barrier(this, ++nextWaitId_, key, request.integer);
      if (!released) {
        close(fmt::format("BARRIER on key {} whose value is not an integer",
                          common::shownKey(request.keys[0])),
              /*isError=*/true);
        return false;
      }
      if (*released) protocol::putU8(out, protocol::kStopWaiting);
      return true;
    }
  }
  return true;
}

void Session::onWaitDone(std::uint64_t) {
  // Never inside a reply under way in slices: that would break its framing. It follows it.
  protocol::putU8(sliced_ ? deferred_ : pending_.bytes(), protocol::kStopWaiting);
  if (!processing_) flush();
  accountReplies();
}

void Session::onWatchEvent(protocol::WatchEvent event, std::string_view key,
                           const ValueRef& oldValue, const ValueRef& newValue) {
  // Other clients' writes produce these events, so pausing this peer's reads cannot bound them.
  if (replyBytesQueued() > context_.options.maxPendingReplyBytes) {
    close(fmt::format("has {} bytes of unread WATCH_KEY events, over the {}-byte pending-reply "
                      "limit",
                      replyBytesQueued(), context_.options.maxPendingReplyBytes),
          /*isError=*/true);
    return;
  }
  if (sliced_) {
    // Rare (a 1.13 client has no MULTI_GET or LIST_KEYS to be under way): copied after it.
    const auto bytesOf = [](const ValueRef& value) {
      return value ? std::string_view(value->bytes) : std::string_view();
    };
    protocol::putU8(deferred_, static_cast<std::uint8_t>(event));
    protocol::putBlob(deferred_, key);
    protocol::putBlob(deferred_, bytesOf(oldValue));
    protocol::putBlob(deferred_, bytesOf(newValue));
  } else {
    // Every watcher of a key gets the same buffers, as every reader of a GET does.
    protocol::putU8(pending_.bytes(), static_cast<std::uint8_t>(event));
    protocol::putBlob(pending_.bytes(), key);
    pending_.appendBlob(oldValue);
    pending_.appendBlob(newValue);
  }
  if (!processing_) flush();
  accountReplies();
}

void Session::flush() {
  if (closed_ || writing_ || pending_.empty()) return;
  // Replies are small and the socket buffer is almost always free: write now, in place, and
  // only fall back to an asynchronous write for what the kernel did not take. This saves the
  // completion's trip through the event loop on nearly every reply. Each write gathers the
  // queue's own bytes and the stored values it references (at most ReplyQueue::kMaxBuffers
  // pieces): the loop ends when the queue is empty or the kernel took less than offered.
  bool released = false;
  while (!pending_.empty()) {
    pending_.gather(writeBuffers_);
    const std::size_t offered = boost::asio::buffer_size(writeBuffers_);
    boost::system::error_code writeError;
    const std::size_t written = socket_.write_some(writeBuffers_, writeError);
    if (writeError && writeError != boost::asio::error::would_block) {
      close(fmt::format("write failed: {}", writeError.message()), /*isError=*/false);
      return;
    }
    released |= pending_.consume(written);
    if (written < offered) break;
  }
  if (pending_.empty()) {
    pending_.clear(kRetainedWriteBuffer);
    accountReplies(released);
    return;
  }
  // The rest is written asynchronously from inFlight_, which nothing is appended to meanwhile. A
  // peer that stops reading holds what it did not read, not the capacity the replies were
  // appended into (compact), and no copy of the values it references.
  pending_.compact(kRetainedWriteBuffer);
  std::swap(inFlight_, pending_);
  writing_ = true;
  lastWriteProgressAt_ = Clock::now();
  accountReplies(released);
  writeInFlight();
}

void Session::writeInFlight() {
  // One write_some per completion rather than async_write: each completion is progress, and the
  // write-stall timeout is about progress (a slow reader still reading a large reply is fine).
  inFlight_.gather(writeBuffers_);
  socket_.async_write_some(
      writeBuffers_,
      [self = shared_from_this()](const boost::system::error_code& error, std::size_t bytes) {
        self->onWritten(error, bytes);
      });
}

void Session::onWritten(const boost::system::error_code& error, std::size_t bytes) {
  if (closed_) {
    writing_ = false;
    return;
  }
  if (error) {
    writing_ = false;
    close(fmt::format("write failed: {}", error.message()), /*isError=*/false);
    return;
  }
  lastWriteProgressAt_ = Clock::now();
  const bool released = inFlight_.consume(bytes);
  if (!inFlight_.empty()) {
    accountReplies(released);
    writeInFlight();
    return;
  }
  writing_ = false;
  inFlight_.clear(kRetainedWriteBuffer);
  flush();
  accountReplies(released);
  if (blocked_ && replyBytesQueued() <= context_.options.maxPendingReplyBytes / 2) {
    serve();  // the waiting request or slice, the rest of the read buffer, then the next read
  }
}

void Session::accountReplies(bool releasedShared) {
  const std::size_t now = closed_ ? 0 : ownedReplyBytes();
  if (now == accountedReplyBytes_ && !releasedShared) return;  // the common case: one load
  if (now >= accountedReplyBytes_) {
    context_.pendingReplyBytes.fetch_add(now - accountedReplyBytes_, std::memory_order_relaxed);
    accountedReplyBytes_ = now;
    // A released shared value may have been the last reference to an overwritten one: the
    // detached bytes fell, which is room too.
    if (!releasedShared) return;
  } else {
    const std::size_t freed = accountedReplyBytes_ - now;
    accountedReplyBytes_ = now;
    context_.pendingReplyBytes.fetch_sub(freed, std::memory_order_relaxed);
  }
  // The waiting sessions are resumed once the smallest of their replies fits (mayQueue's rule for
  // a connection with nothing waiting): sooner, every small drain would wake them all only to
  // find no room again.
  if (context_.waitingForRoom.empty() || context_.roomPassPosted) return;
  const std::size_t total = context_.replyMemory();
  const std::size_t budget = context_.options.maxTotalPendingReplyBytes;
  const std::size_t room = budget - std::min(total, budget);
  if (context_.smallestRoomWait > room && total != 0) return;
  context_.roomPassPosted = true;
  boost::asio::post(socket_.get_executor(),
                    [&context = context_] { resumeWaitingForRoom(context); });
}

void Session::resumeWaitingForRoom(ServerContext& context) {
  context.roomPassPosted = false;
  context.smallestRoomWait = SIZE_MAX;
  std::vector<std::weak_ptr<Session>> waiting;
  waiting.swap(context.waitingForRoom);
  for (const auto& entry : waiting) {
    const std::shared_ptr<Session> session = entry.lock();
    if (!session || session->closed_) continue;
    session->onRoomList_ = false;
    if (session->blocked_) session->serve();  // blocks, and enlists, again if still no room
  }
}



void Session::checkDeadlines(Clock::time_point now) {
  const auto& options = context_.options;
  if (decoder_.midRequest() && now - lastReadAt_ > options.partialRequestTimeout) {
    close(fmt::format("sent part of a request, then nothing for {} ms",
                      options.partialRequestTimeout.count()),
          /*isError=*/true);
  } else if (writing_ && now - lastWriteProgressAt_ > options.writeStallTimeout) {
    close(fmt::format("has not read its replies for {} ms", options.writeStallTimeout.count()),
          /*isError=*/true);
  }
}

void Session::close(std::string_view reason, bool isError) {
  if (closed_) return;
  closed_ = true;
  if (isError) {
    // The line before the count: whoever sees the count (the stats, /healthz, a test) can rely
    // on the line being written already.
    spdlog::warn("closing connection from {}: {}", peer_, reason);
    context_.protocolErrors.fetch_add(1, std::memory_order_relaxed);
  } else {
    spdlog::debug("connection from {} closed: {}", peer_, reason);
  }
  context_.kv.forget(this);
  sliced_.reset();  // a KeyListing must not outlive the state it lists
  deferred_.clear();
  // The values it referenced are released now (inFlight_'s when the aborted write completes:
  // its buffers are the write's until then).
  pending_.clear(0);
  accountReplies();
  boost::system::error_code ignored;
  socket_.close(ignored);
  context_.connections.fetch_sub(1, std::memory_order_relaxed);
  // Last: this may drop the final owning reference when no handler is in flight.
  context_.sessions.erase(this);
}

}  // namespace ddprun::rendezvous
