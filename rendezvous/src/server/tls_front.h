// TlsFront: one connection to a store that serves TLS (ServerOptions::tls), from accept until
// either end closes. It runs the server side of the TLS handshake, then carries the plaintext to
// and from the rest of the server through a socket pair whose other end is handed to a
// HandshakeGate like any accepted connection: the token handshake, the session, its limits and
// its timeouts all work on it unchanged, and a store without TLS has no code of it in its path.
//
// Each direction moves one buffer at a time, so a peer that stops reading stops the session's
// replies from leaving (the session's write-stall timeout then closes it) instead of growing a
// buffer here.
//
// A front that does not finish the TLS handshake within ServerOptions::handshakeTimeout is
// refused; until then it counts as a connection in the handshake (maxPendingHandshakes).
//
// Lives on the server's single event-loop thread.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "server/refusal_log.h"

namespace ddprun::rendezvous {

struct ServerContext;

class TlsFront final : public std::enable_shared_from_this<TlsFront> {
 public:
  using Clock = std::chrono::steady_clock;

  // `peerAddress`: the peer's IP alone (refusals are logged per address); `peer`: with its port.
  TlsFront(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls, std::string peer,
           std::string peerAddress, ServerContext& context);

  void start();
  // In the TLS handshake: closes without a reply; `reason` and `detail` go to the refusal log
  // (server/refusal_log.h). Idempotent; does nothing once the handshake is done.
  void refuse(Refusal reason, std::string_view detail = {});
  // Closes both ends without a word (the server is shutting down). Idempotent.
  void close();
  void checkDeadline(Clock::time_point now);
  Clock::time_point acceptedAt() const { return acceptedAt_; }
  bool inHandshake() const { return !handedOver_ && !closed_; }

 private:
  using Buffer = std::array<char, 64 * 1024>;

  void onHandshake(const boost::system::error_code& error);
  // Copies what `from` sends to `to`, one buffer at a time, until either fails.
  template <typename From, typename To>
  void carry(From& from, To& to, Buffer& buffer);
  // Removes this front from the context: the last owning reference may go with it.
  void leave();

  boost::asio::ssl::stream<boost::asio::ip::tcp::socket> tls_;
  boost::asio::local::stream_protocol::socket inner_;  // ours of the pair; the gate has the other
  std::string peer_;
  std::string peerAddress_;
  ServerContext& context_;
  Clock::time_point acceptedAt_;
  Buffer fromPeer_{};
  Buffer toPeer_{};
  bool handedOver_ = false;  // the TLS handshake is done and the pair's other end is a gate's
  bool closed_ = false;
};

}  // namespace ddprun::rendezvous
