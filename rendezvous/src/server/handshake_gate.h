// HandshakeGate: a new connection to a store that has a token, until it has proved it holds the
// token (auth/handshake.h). Only then does it become a Session; until then none of its bytes reach
// the request decoder, and it gets nothing but the challenge.
//
// A gate is refused, closed without a reply, when the first bytes are not a token hello (a torch
// client, a scanner: at the first byte that differs), when the proof is wrong, or when the whole
// handshake takes longer than ServerOptions::handshakeTimeout (a connection that never sends a
// byte). At most ServerOptions::maxPendingHandshakes gates wait at once; a new connection beyond
// that evicts the oldest, so idle connections cannot lock out a job's clients, which finish the
// handshake within a round trip.
//
// Lives on the server's single event-loop thread.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "auth/handshake.h"
#include "server/refusal_log.h"

namespace ddprun::rendezvous {

struct ServerContext;

class HandshakeGate final : public std::enable_shared_from_this<HandshakeGate> {
 public:
  using Clock = std::chrono::steady_clock;

  // `peerAddress`: the peer's IP alone (refusals are logged per address); `peer`: with its port.
  HandshakeGate(boost::asio::ip::tcp::socket socket, std::string peer, std::string peerAddress,
                ServerContext& context);

  void start();
  // Closes without a reply; `reason` and `detail` go to the refusal log (server/refusal_log.h).
  // Idempotent.
  void refuse(Refusal reason, std::string_view detail = {});
  // Closes without a word (the server is shutting down). Idempotent.
  void close();
  void checkDeadline(Clock::time_point now);
  Clock::time_point acceptedAt() const { return acceptedAt_; }

 private:
  void readHello();
  void onHello(const boost::system::error_code& error, std::size_t bytes);
  void onChallengeSent(const boost::system::error_code& error);
  void onProof(const boost::system::error_code& error);
  // Removes this gate from the context: the last owning reference may go with it.
  void leave();

  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
  std::string peerAddress_;
  ServerContext& context_;
  auth::ServerHandshake handshake_;
  std::array<char, auth::kClientHelloBytes> hello_{};
  std::size_t helloReceived_ = 0;
  std::string challenge_;
  std::array<char, auth::kClientProofBytes> proof_{};
  Clock::time_point acceptedAt_;
  bool done_ = false;  // admitted or closed: no handler may act any more
  bool closed_ = false;
};

}  // namespace ddprun::rendezvous
