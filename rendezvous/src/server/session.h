// Session: one client connection of the rendezvous server.
//
//                 +----------------------------------------------+
//   socket ---->  | reader: async_read_some -> RequestDecoder    |
//                 |   -> handle(request) -> KvState              |
//                 |   -> reply bytes appended to pending_        |
//                 +----------------------------------------------+
//                          |  flush()               ^ onWaitDone / onWatchEvent
//                          v                        | (other sessions' writes)
//                 +----------------------------------------------+
//   socket <----  | writer: async_write_some(inFlight_) until all|
//                 +----------------------------------------------+
//                 deadlines: checked by the server's sweep timer
//
// Replies leave in request order, except STOP_WAITING of a parked WAIT or BARRIER, which leaves
// when the wait is satisfied (torch's servers behave the same; CANCEL_WAIT relies on it).
// Backpressure: when more than maxPendingReplyBytes wait to be written, decoding stops (even in
// the middle of a read buffer) until the peer has read enough. What pausing cannot bound closes
// the connection instead: a MULTI_GET whose reply alone would exceed the limit (one large value
// named many times), an APPEND past the value limit (every stored value then fits the limits),
// and a watcher whose unread events exceed the limit (other clients' writes produce them).
//
// Errors are values inside the event loop: a bad frame, a stall or an I/O error closes this
// session, logs one line naming the peer, and never reaches io_context::run().
//
// Lives on the server's single event-loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "ddprun/rendezvous/server.h"
#include "kv_state.h"
#include "protocol/request_decoder.h"
#include "server/refusal_log.h"

namespace ddprun::rendezvous {

class HandshakeGate;
class Session;

// What every session of one server shares.
struct ServerContext {
  explicit ServerContext(const ServerOptions& serverOptions) : options(serverOptions) {}

  const ServerOptions& options;
  KvState kv;
  // Owning references; a closed session removes itself, in-flight handlers keep it alive.
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions;
  // Connections still proving the token (only with ServerOptions::secret), owned the same way.
  std::unordered_map<HandshakeGate*, std::shared_ptr<HandshakeGate>> gates;
  RefusalLog refusals;
  std::atomic<std::size_t> connections{0};
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> protocolErrors{0};
  std::atomic<std::uint64_t> refusedHandshakes{0};
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
  void onWatchEvent(protocol::WatchEvent event, std::string_view key, std::string_view oldValue,
                    std::string_view newValue) override;

 private:
  void readMore();
  void onRead(const boost::system::error_code& error, std::size_t bytes);
  // Decodes and handles buffered input until it runs out or backpressure pauses it.
  void processInput();
  // Applies one request; false when the connection must close (reason already given).
  bool handle(protocol::Request& request);
  void flush();
  // Hands the unsent rest of inFlight_ to one async_write_some.
  void writeInFlight();
  void onWritten(const boost::system::error_code& error, std::size_t bytes);
  std::size_t replyBytesQueued() const {
    return pending_.size() + inFlight_.size() - inFlightSent_;
  }

  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
  ServerContext& context_;
  protocol::RequestDecoder decoder_;

  std::vector<unsigned char> readBuffer_;
  std::size_t readBegin_ = 0;  // unconsumed input: [readBegin_, readEnd_)
  std::size_t readEnd_ = 0;

  std::string pending_;   // replies not yet handed to the socket
  std::string inFlight_;  // the buffer being written asynchronously
  std::size_t inFlightSent_ = 0;  // how much of inFlight_ the kernel has taken

  std::uint64_t nextWaitId_ = 0;
  Clock::time_point lastReadAt_;
  Clock::time_point lastWriteProgressAt_;  // while writing_: start, or the last bytes taken
  bool reading_ = false;
  bool writing_ = false;
  bool processing_ = false;
  bool pausedForBackpressure_ = false;
  bool closed_ = false;
};

}  // namespace ddprun::rendezvous
