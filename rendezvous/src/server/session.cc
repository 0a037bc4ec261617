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

void Session::admit(boost::asio::ip::tcp::socket socket, std::string peer, ServerContext& context) {
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
  // A read that filled the buffer suggests a large request or a pipelined burst: read more per
  // call.
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
      const std::uint64_t asked =
          request.integer < 0 ? 0 : static_cast<std::uint64_t>(request.integer);
      const std::size_t names =
          static_cast<std::size_t>(std::min<std::uint64_t>(asked, Store::kMaxListedKeys));
      return 9 + names * 8 + Store::kMaxListedBytes;
    }
    default:  // a count, a code or a nonce; MULTI_GET and LIST_KEYS are admitted a slice at a time
      return 16;
  }
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
