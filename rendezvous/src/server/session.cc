#include "server/session.h"

#include <algorithm>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

namespace ddprun::rendezvous {

using protocol::Op;
using protocol::Request;

namespace {

constexpr std::size_t kInitialReadBuffer = 2 * 1024;
constexpr std::size_t kMaxReadBuffer = 256 * 1024;
// Reply buffers that grew past this (a large GET) are released once written, so that a
// connection that once fetched 8 MiB does not keep 8 MiB for its lifetime.
constexpr std::size_t kRetainedWriteBuffer = 256 * 1024;

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
  processInput();
  // A read that filled the buffer suggests a large request or a pipelined burst: read more per call.
  if (bytes == readBuffer_.size() && readBuffer_.size() < kMaxReadBuffer && readBegin_ == readEnd_) {
    readBuffer_.resize(readBuffer_.size() * 2);
  }
}

void Session::processInput() {
  for (;;) {
    processing_ = true;
    while (readBegin_ < readEnd_ && !closed_) {
      if (replyBytesQueued() > context_.options.maxPendingReplyBytes) {
        pausedForBackpressure_ = true;
        break;
      }
      const unsigned char* cursor = readBuffer_.data() + readBegin_;
      const auto status = decoder_.decode(cursor, readBuffer_.data() + readEnd_);
      readBegin_ = static_cast<std::size_t>(cursor - readBuffer_.data());
      if (status == protocol::RequestDecoder::Status::kError) {
        close(decoder_.error(), /*isError=*/true);
        break;
      }
      if (status == protocol::RequestDecoder::Status::kRequest) {
        bool keep;
        try {
          keep = handle(decoder_.request());
        } catch (const std::exception& e) {  // e.g. bad_alloc: costs this connection only
          close(fmt::format("internal error handling {}: {}", opName(decoder_.request().op),
                            e.what()),
                /*isError=*/true);
          keep = false;
        }
        if (!keep) break;
      }
    }
    processing_ = false;
    if (closed_) return;
    flush();
    if (closed_) return;
    // flush() may have handed everything to the kernel at once; then nothing will call back
    // (onWritten) to resume a paused connection, so resume here.
    if (pausedForBackpressure_ && !writing_ &&
        replyBytesQueued() <= context_.options.maxPendingReplyBytes / 2) {
      pausedForBackpressure_ = false;
      continue;
    }
    break;
  }
  if (!pausedForBackpressure_) readMore();
}

bool Session::handle(Request& request) {
  const auto dialect = *decoder_.dialect();
  std::string& out = pending_;
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
    case Op::kSet:
      kv.set(request.keys[0], std::move(request.values[0]));
      return true;
    case Op::kCompareSet:
      protocol::putBlob(out, kv.compareSet(request.keys[0], request.values[0], request.values[1]));
      return true;
    case Op::kGet: {
      const std::string* value = kv.find(request.keys[0]);
      if (value == nullptr && dialect == WireDialect::kTorch113) {
        // torch 1.13's server drops the connection here; its clients always WAIT first.
        close(fmt::format("GET of missing key '{}'", request.keys[0]), /*isError=*/false);
        return false;
      }
      protocol::putBlob(out, value ? std::string_view(*value) : std::string_view());
      return true;
    }
    case Op::kAdd: {
      const auto value = kv.add(request.keys[0], request.integer);
      if (!value) {
        close(fmt::format("ADD on key '{}' whose value is not an integer", request.keys[0]),
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
    case Op::kWait:
      if (kv.wait(this, ++nextWaitId_, request.keys)) protocol::putU8(out, protocol::kStopWaiting);
      return true;
    case Op::kNumKeys:
      protocol::putI64(out, static_cast<std::int64_t>(kv.numKeys()));
      return true;
    case Op::kWatchKey:
      kv.watch(this, request.keys[0]);
      protocol::putU8(out, protocol::kKeyCallbackRegistered);
      return true;
    case Op::kDeleteKey:
      protocol::putI64(out, kv.erase(request.keys[0]) ? 1 : 0);
      return true;
    case Op::kAppend: {
      // Every stored value stays within the value limit, so that a single-value reply (GET,
      // COMPARE_SET, ...) is bounded by the limits too, whatever was appended before.
      const std::string* existing = kv.find(request.keys[0]);
      const std::size_t total = (existing ? existing->size() : 0) + request.values[0].size();
      if (total > context_.options.limits.maxValueBytes) {
        close(fmt::format("APPEND to key '{}' would make a {}-byte value, over the {}-byte limit",
                          request.keys[0], total, context_.options.limits.maxValueBytes),
              /*isError=*/true);
        return false;
      }
      kv.append(request.keys[0], request.values[0]);
      return true;
    }
    case Op::kMultiGet: {
      // Size the reply before building it: a few hundred bytes naming one large value many times
      // would otherwise make the server allocate up to 128 Ki times the value limit at once (the
      // backpressure check only runs between requests, so it cannot stop this one).
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
      out.reserve(out.size() + replyBytes);
      for (const std::string& key : request.keys) {
        // Like torch's libuv server (the 2.x default): a missing key reads as an empty value.
        const std::string* value = kv.find(key);
        protocol::putBlob(out, value ? std::string_view(*value) : std::string_view());
      }
      return true;
    }
    case Op::kMultiSet:
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        kv.set(request.keys[i], std::move(request.values[i]));
      }
      return true;
    case Op::kCancelWait:
      kv.cancelWaits(this);
      protocol::putU8(out, protocol::kWaitCanceled);
      return true;
    case Op::kPing:
      protocol::putU32(out, request.word);
      return true;
    case Op::kQueuePush:
      kv.queuePush(request.keys[0], std::move(request.values[0]));
      return true;
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
      const std::vector<std::string> keys = kv.keys();
      protocol::putI64(out, static_cast<std::int64_t>(keys.size()));
      for (const std::string& key : keys) protocol::putBlob(out, key);
      return true;
    }
    case Op::kHold:
      protocol::putBlob(out, kv.hold(this, request.keys[0], request.values[0],
                                     std::chrono::milliseconds(request.word), request.keys[1],
                                     request.values[1], Clock::now()));
      return true;
    case Op::kRelease:
      protocol::putI64(out, kv.release(this, request.keys[0]) ? 1 : 0);
      return true;
    case Op::kBarrier: {
      const auto released = kv.barrier(this, ++nextWaitId_, request.keys[0], request.integer);
      if (!released) {
        close(fmt::format("BARRIER on key '{}' whose value is not an integer", request.keys[0]),
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
  protocol::putU8(pending_, protocol::kStopWaiting);
  if (!processing_) flush();
}

void Session::onWatchEvent(protocol::WatchEvent event, std::string_view key,
                           std::string_view oldValue, std::string_view newValue) {
  // Other clients' writes produce these events, so pausing this peer's reads cannot bound them.
  if (replyBytesQueued() > context_.options.maxPendingReplyBytes) {
    close(fmt::format("has {} bytes of unread WATCH_KEY events, over the {}-byte pending-reply "
                      "limit",
                      replyBytesQueued(), context_.options.maxPendingReplyBytes),
          /*isError=*/true);
    return;
  }
  protocol::putU8(pending_, static_cast<std::uint8_t>(event));
  protocol::putBlob(pending_, key);
  protocol::putBlob(pending_, oldValue);
  protocol::putBlob(pending_, newValue);
  if (!processing_) flush();
}

void Session::flush() {
  if (closed_ || writing_ || pending_.empty()) return;
  // Replies are small and the socket buffer is almost always free: write now, in place, and
  // only fall back to an asynchronous write for what the kernel did not take. This saves the
  // completion's trip through the event loop on nearly every reply.
  boost::system::error_code writeError;
  const std::size_t written = socket_.write_some(boost::asio::buffer(pending_), writeError);
  if (writeError && writeError != boost::asio::error::would_block) {
    close(fmt::format("write failed: {}", writeError.message()), /*isError=*/false);
    return;
  }
  if (written == pending_.size()) {
    if (pending_.capacity() > kRetainedWriteBuffer) {
      std::string().swap(pending_);
    } else {
      pending_.clear();
    }
    return;
  }
  pending_.erase(0, written);
  std::swap(pending_, inFlight_);
  inFlightSent_ = 0;
  writing_ = true;
  lastWriteProgressAt_ = Clock::now();
  writeInFlight();
}

void Session::writeInFlight() {
  // One write_some per completion rather than async_write: each completion is progress, and the
  // write-stall timeout is about progress (a slow reader still reading a large reply is fine).
  socket_.async_write_some(
      boost::asio::buffer(inFlight_.data() + inFlightSent_, inFlight_.size() - inFlightSent_),
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
  inFlightSent_ += bytes;
  if (inFlightSent_ < inFlight_.size()) {
    writeInFlight();
    return;
  }
  writing_ = false;
  inFlightSent_ = 0;
  if (inFlight_.capacity() > kRetainedWriteBuffer) {
    std::string().swap(inFlight_);
  } else {
    inFlight_.clear();
  }
  flush();
  if (pausedForBackpressure_ && replyBytesQueued() <= context_.options.maxPendingReplyBytes / 2) {
    pausedForBackpressure_ = false;
    processInput();  // the rest of the paused read buffer, then the next read
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
    context_.protocolErrors.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("closing connection from {}: {}", peer_, reason);
  } else {
    spdlog::debug("connection from {} closed: {}", peer_, reason);
  }
  context_.kv.forget(this);
  boost::system::error_code ignored;
  socket_.close(ignored);
  context_.connections.fetch_sub(1, std::memory_order_relaxed);
  // Last: this may drop the final owning reference when no handler is in flight.
  context_.sessions.erase(this);
}

}  // namespace ddprun::rendezvous
