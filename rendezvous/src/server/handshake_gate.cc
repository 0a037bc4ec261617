#include "server/handshake_gate.h"

#include <spdlog/spdlog.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "server/session.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;

HandshakeGate::HandshakeGate(asio::ip::tcp::socket socket, std::string peer,
                             std::string peerAddress, ServerContext& context)
    : socket_(std::move(socket)),
      peer_(std::move(peer)),
      peerAddress_(std::move(peerAddress)),
      context_(context),
      handshake_(*context.options.secret),
      acceptedAt_(Clock::now()) {}

void HandshakeGate::start() { readHello(); }

void HandshakeGate::readHello() {
  // Whatever has arrived, so that a peer speaking something else is refused at its first bytes
  // (a torch client sends a 5-byte VALIDATE and waits) instead of at the deadline.
  socket_.async_read_some(
      asio::buffer(hello_.data() + helloReceived_, hello_.size() - helloReceived_),
      [self = shared_from_this()](const boost::system::error_code& error, std::size_t bytes) {
        self->onHello(error, bytes);
      });
}

void HandshakeGate::onHello(const boost::system::error_code& error, std::size_t bytes) {
  if (done_) return;
  if (error) {
    refuse(helloReceived_ + bytes == 0 ? Refusal::kSilent : Refusal::kLeftHandshake);
    return;
  }
  helloReceived_ += bytes;
  const std::string_view received(hello_.data(), helloReceived_);
  if (!auth::ServerHandshake::mayBeHello(received)) {
    refuse(Refusal::kNotHandshake);
    return;
  }
  if (helloReceived_ < hello_.size()) {
    readHello();
    return;
  }
  auto challenge = handshake_.challenge(received);
  if (!challenge) {
    refuse(Refusal::kMalformedHello);
    return;
  }
  challenge_ = std::move(*challenge);
  asio::async_write(socket_, asio::buffer(challenge_),
                    [self = shared_from_this()](const boost::system::error_code& e, std::size_t) {
                      self->onChallengeSent(e);
                    });
}

void HandshakeGate::onChallengeSent(const boost::system::error_code& error) {
  if (done_) return;
  if (error) {
    refuse(Refusal::kLeftHandshake);
    return;
  }
  // Exactly the proof: the client may send its first request right behind it, and those bytes
  // belong to the Session.
  asio::async_read(socket_, asio::buffer(proof_),
                   [self = shared_from_this()](const boost::system::error_code& e, std::size_t) {
                     self->onProof(e);
                   });
}

void HandshakeGate::onProof(const boost::system::error_code& error) {
  if (done_) return;
  if (error) {
    // A client with another token stops here: it saw the server's proof fail. So does a ddprun
    // client without one that asks whether this store wants one (client/store_handshake.h).
    refuse(Refusal::kLeftAfterChallenge);
    return;
  }
  if (!handshake_.verify(std::string_view(proof_.data(), proof_.size()))) {
    refuse(Refusal::kWrongProof);
    return;
  }
  done_ = true;
  spdlog::debug("connection from {} proved the token", peer_);
  Session::admit(std::move(socket_), std::move(peer_), context_);
  leave();
}

void HandshakeGate::checkDeadline(Clock::time_point now) {
  if (!done_ && now - acceptedAt_ > context_.options.handshakeTimeout) {
    refuse(Refusal::kHandshakeTimeout,
           fmt::format("({} ms)", context_.options.handshakeTimeout.count()));
  }
}

void HandshakeGate::refuse(Refusal reason, std::string_view detail) {
  if (done_) return;
  context_.refusedHandshakes.fetch_add(1, std::memory_order_relaxed);
  context_.refusals.report(peer_, peerAddress_, reason, detail);
  close();
}

void HandshakeGate::close() {
  if (closed_) return;
  done_ = closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  context_.connections.fetch_sub(1, std::memory_order_relaxed);
  leave();
}

void HandshakeGate::leave() { context_.gates.erase(this); }

}  // namespace ddprun::rendezvous
