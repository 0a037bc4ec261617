// Session: one client connection of the rendezvous server.
//
//                 +----------------------------------------------+
//   socket ---->  | reader: async_read_some -> RequestDecoder    |
//                 |   -> handle(request) -> KvState              |
//                 |   -> reply bytes appended to pending_        |
//                 |      (large values by reference: ReplyQueue) |
//                 +----------------------------------------------+
//                          |  flush()               ^ onWaitDone / onWatchEvent
//                          v                        | (other sessions' writes)
//                 +----------------------------------------------+
//   socket <----  | writer: async_write_some(inFlight_) until all|
//                 |   (gathered: one sendmsg per write)          |
//                 +----------------------------------------------+
//                 deadlines: checked by the server's sweep timer
//
// Replies leave in request order, except STOP_WAITING of a parked WAIT or BARRIER, which leaves
// when the wait is satisfied (torch's servers behave the same; CANCEL_WAIT relies on it), though
// never inside a reply produced in slices.
// Backpressure: a decoded request is handled only when its reply fits (mayQueue): this
// connection has at most maxPendingReplyBytes waiting to be written, and all connections
// together stay within maxTotalPendingReplyBytes, of which connections with replies waiting may
// fill three quarters (the rest is for those whose peers read; small replies to those always
// go). Otherwise the request waits, with the rest of the read buffer, until this connection's
// peer reads or, when it has read everything, others drain (the server-wide list). LIST_KEYS and
// MULTI_GET replies are produced a slice per event-loop turn (SlicedReply), each slice admitted
// the same way. What pausing cannot bound closes the connection instead: a MULTI_GET whose reply
// alone would exceed the limit (one large value named many times), an APPEND past the value
// limit (every stored value then fits the limits), a watcher whose unread events exceed the limit
// (other clients' writes produce them), and a write that would take the stored data over
// maxStoredBytes (TCPStore has no error reply).
// What the two limits count, now that a reply references a large stored value rather than
// copying it (ReplyQueue):
//   per connection (maxPendingReplyBytes): every byte still to be written, the shared values at
//     their full size. It bounds how far one peer may fall behind, and so what its unread replies
//     can keep alive of values overwritten meanwhile.
//   all connections (maxTotalPendingReplyBytes): the memory replies hold beyond the stored data:
//     the bytes they own (codes, lengths, small values) plus the values overwritten or erased
//     while referenced (KvState::detachedBytes()). A value still stored costs a reply nothing
//     here: maxStoredBytes counts it, once, however many replies send it. So N clients reading
//     one value of V bytes cost V, not N x V, and are not throttled as if they did.
//
// Errors are values inside the event loop: a bad frame, a stall or an I/O error closes this
// session, logs one line naming the peer, and never reaches io_context::run().
//
// Lives on the server's single event-loop thread.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddprun/rendezvous/server.h"
#include "kv_state.h"
#include "protocol/request_decoder.h"
#include "server/refusal_log.h"
#include "server/reply_queue.h"
#include "server/sliced_reply.h"

namespace ddprun::rendezvous {

class HandshakeGate;
class Session;
class TlsFront;

// What every session of one server shares.
struct ServerContext {
  explicit ServerContext(const ServerOptions& serverOptions) : options(serverOptions) {}

  const ServerOptions& options;
  KvState kv;
  // Owning references; a closed session removes itself, in-flight handlers keep it alive.
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions;
  // Connections still proving the token (only with ServerOptions::secret), owned the same way.
  std::unordered_map<HandshakeGate*, std::shared_ptr<HandshakeGate>> gates;
  // TLS connections (only with ServerOptions::tls), in their TLS handshake or carrying a gate's or
  // a session's bytes, owned the same way.
  std::unordered_map<TlsFront*, std::shared_ptr<TlsFront>> tlsFronts;
  std::size_t tlsHandshakes = 0;  // of tlsFronts, those still in the TLS handshake
  RefusalLog refusals;
  std::atomic<std::size_t> connections{0};
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> protocolErrors{0};
  std::atomic<std::uint64_t> refusedHandshakes{0};
  // Requests served, per op (/metrics): counted on the serving thread, read from any.
  std::array<std::atomic<std::uint64_t>, protocol::kOpCount> operations{};
  // Reply bytes not yet taken by the kernel that the replies own (not the stored values they
  // reference), every session's together (Session::accountReplies).
  std::atomic<std::size_t> pendingReplyBytes{0};
  // The memory replies hold beyond the stored data: what maxTotalPendingReplyBytes bounds.
  std::size_t replyMemory() const {
    return pendingReplyBytes.load(std::memory_order_relaxed) + kv.detachedBytes();
  }
  // Sessions whose peers have read every reply but whose next reply does not fit the total:
  // nothing of their own will resume them, so one posted pass does once the smallest of those
  // replies fits (weak: a session closed meanwhile is skipped).
  std::vector<std::weak_ptr<Session>> waitingForRoom;
  std::size_t smallestRoomWait = SIZE_MAX;
  bool roomPassPosted = false;
};

class Session final : public std::enable_shared_from_this<Session>, public KvObserver {
 public:
  using Clock = std::chrono::steady_clock;

  Session(boost::asio::ip::tcp::socket socket, std::string peer, ServerContext& context);

  // Makes a session of an accepted (and, with a token, authenticated) connection, registers it in
  // `context` and starts serving it.
  static void admit(boost::asio::ip::tcp::socket socket, std::string peer, ServerContext& context);

  void start();
  // Closes the connection and forgets its waits. `reason` is logged; `isError` selects warn and
  // counts a protocol error, otherwise the line is at debug level. Idempotent.
  void close(std::string_view reason, bool isError);
  // Closes the session if it has stalled mid-request or stopped reading its replies.
  void checkDeadlines(Clock::time_point now);

  void onWaitDone(std::uint64_t waitId) override;
  void onWatchEvent(protocol::WatchEvent event, std::string_view key, const ValueRef& oldValue,
                    const ValueRef& newValue) override;

  // Resumes every session on context.waitingForRoom that is still open (the server's pass).
  static void resumeWaitingForRoom(ServerContext& context);

 private:
  // Why serve() stopped.
  enum class Stop : std::uint8_t {
    kInputDone,  // every buffered byte is consumed: read more
    kNoRoom,     // the next reply does not fit: wait for writes to drain (blocked_)
    kYield,      // a sliced reply had its slice this turn: continue in a posted handler
  };

  void readMore();
  void onRead(const boost::system::error_code& error, std::size_t bytes);
  // Produces slices, decodes and handles buffered input until it runs out, a reply does not fit
  // or a slice has been produced this turn; then reads, waits or posts its continuation.
  void serve();
  Stop serveBuffered(int& slicesThisTurn);
  // Applies one request; false when the connection must close (reason already given). It picks
  // the handler of the request's kind (session_requests.cc), each of which returns the same.
  bool handle(protocol::Request& request);
  // With a torch 1.13 client, drops the WAIT still parked when its next request arrives.
  void cancelTimedOutWaits();
  bool handleValidate(const protocol::Request& request);
  bool handlePing(const protocol::Request& request);
  bool handleNumKeys();
  bool handleSet(protocol::Request& request);
  bool handleCompareSet(const protocol::Request& request);
  bool handleAdd(const protocol::Request& request);
  bool handleAppend(const protocol::Request& request);
  bool handleMultiSet(protocol::Request& request);
  bool handleDeleteKey(const protocol::Request& request);
  bool handleDeletePrefix(const protocol::Request& request);
  bool handleGet(const protocol::Request& request);
  bool handleCheck(const protocol::Request& request);
  bool handleMultiGet(protocol::Request& request);
  bool handleListKeys();
  bool handleListPrefix(const protocol::Request& request);
  bool handleQueuePush(protocol::Request& request);
  bool handleQueuePop(const protocol::Request& request);
  bool handleQueueLen(const protocol::Request& request);
  bool handleWait(const protocol::Request& request);
  bool handleCancelWait();
  bool handleWatchKey(const protocol::Request& request);
  bool handleBarrier(const protocol::Request& request);
  bool handleHold(const protocol::Request& request);
  bool handleRelease(const protocol::Request& request);
  // An upper bound of the bytes the reply `request` makes now would own (a large stored value
  // it references costs it nothing; not counting a sliced reply's slices).
  std::size_t replyBytesOf(const protocol::Request& request) const;
  // Whether this connection may queue a reply owning `bytes` more bytes now.
  bool mayQueue(std::size_t bytes) const;
  // What the next step of serve() would queue: the sliced reply's next slice or the decoded
  // request's reply.
  std::size_t nextReplyBytes() const;
  // True when a write of `op` to `key` fits maxStoredBytes: it adds at most `upperBound` bytes,
  // exactly exactGrowth() (asked only near the budget). Otherwise closes this connection with a
  // warning naming the budget and its flag, and returns false.
  template <typename Growth>
  bool fitsStore(std::size_t upperBound, const Growth& exactGrowth, std::string_view op,
                 std::string_view key);
  void flush();
  // Hands the unsent rest of inFlight_ to one async_write_some.
  void writeInFlight();
  void onWritten(const boost::system::error_code& error, std::size_t bytes);
  // Brings context_.pendingReplyBytes up to date with this session's queue; when it fell far
  // enough (or the write released shared values, `releasedShared`) and sessions wait for room,
  // posts the pass that resumes them.
  void accountReplies(bool releasedShared = false);
  // Every byte still to be written, shared values included (the per-connection limit).
  std::size_t replyBytesQueued() const {
    return pending_.wireBytes() + inFlight_.wireBytes() + deferred_.size();
  }
  // Of those, the bytes this session's queues own (its share of context_.pendingReplyBytes).
  std::size_t ownedReplyBytes() const {
    return pending_.ownedBytes() + inFlight_.ownedBytes() + deferred_.size();
  }

  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
  ServerContext& context_;
  protocol::RequestDecoder decoder_;

  std::vector<unsigned char> readBuffer_;
  std::size_t readBegin_ = 0;  // unconsumed input: [readBegin_, readEnd_)
  std::size_t readEnd_ = 0;

  bool growReadBuffer_ = false;  // the last read filled the buffer: read more per call next

  ReplyQueue pending_;   // replies not yet handed to the socket
  ReplyQueue inFlight_;  // the replies being written asynchronously (nothing is appended to them)
  std::vector<boost::asio::const_buffer> writeBuffers_;  // inFlight_ gathered, reused per write
  // STOP_WAITING bytes that arrived while a sliced reply was under way: they follow it.
  std::string deferred_;
  std::size_t accountedReplyBytes_ = 0;  // this session's share of context_.pendingReplyBytes

  std::unique_ptr<SlicedReply> sliced_;  // the reply being produced, a slice per turn

  std::uint64_t nextWaitId_ = 0;
  Clock::time_point lastReadAt_;
  Clock::time_point lastWriteProgressAt_;  // while writing_: start, or the last bytes taken
  bool reading_ = false;
  bool writing_ = false;
  bool processing_ = false;
  bool requestDecoded_ = false;  // decoder_.request() is complete and not handled yet
  bool blocked_ = false;         // stopped on kNoRoom
  bool onRoomList_ = false;      // in context_.waitingForRoom
  bool continuing_ = false;      // a posted serve() is on its way (kYield)
  bool closed_ = false;
};

}  // namespace ddprun::rendezvous
