#include "server/tls_front.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "server/handshake_gate.h"
#include "server/session.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

TlsFront::TlsFront(tcp::socket socket, asio::ssl::context& tls, std::string peer,
                   std::string peerAddress, ServerContext& context)
    : tls_(std::move(socket), tls),
      inner_(tls_.get_executor()),
      peer_(std::move(peer)),
      peerAddress_(std::move(peerAddress)),
      context_(context),
      acceptedAt_(Clock::now()) {
  ++context_.tlsHandshakes;
}

void TlsFront::start() {
  tls_.async_handshake(asio::ssl::stream_base::server,
                       [self = shared_from_this()](const boost::system::error_code& error) {
                         self->onHandshake(error);
                       });
}

void TlsFront::onHandshake(const boost::system::error_code& error) {
  if (closed_) return;
  if (error) {
    // A client without TLS (torch's, a scanner) sends bytes that are no TLS hello: refused at once.
    refuse(error == asio::error::eof ? Refusal::kLeftTlsHandshake : Refusal::kNotTls);
    return;
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    refuse(Refusal::kNoSocketPair, fmt::format("({})", std::strerror(errno)));
    return;
  }
  boost::system::error_code ignored;
  inner_.assign(asio::local::stream_protocol(), pair[0], ignored);
  // The gate and the session only read, write and close their socket, which a stream socket of
  // either family does alike; the real peer's name travels with it for their log lines.
  tcp::socket gateSide(tls_.get_executor());
  gateSide.assign(tcp::v4(), pair[1], ignored);
  handedOver_ = true;  // from here the gate (then the session) accounts for the connection
  --context_.tlsHandshakes;
  auto gate = std::make_shared<HandshakeGate>(std::move(gateSide), peer_, peerAddress_, context_);
  context_.gates.emplace(gate.get(), gate);
  gate->start();
  carry(tls_, inner_, fromPeer_);
  carry(inner_, tls_, toPeer_);
}

template <typename From, typename To>
void TlsFront::carry(From& from, To& to, Buffer& buffer) {
  from.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &from, &to, &buffer](
                                                 const boost::system::error_code& error,
                                                 std::size_t bytes) {
    if (self->closed_) return;
    if (error) {
      self->close();
      return;
    }
    asio::async_write(to, asio::buffer(buffer.data(), bytes),
                      [self, &from, &to, &buffer](const boost::system::error_code& e, std::size_t) {
                        if (self->closed_) return;
                        if (e) {
                          self->close();
                          return;
                        }
                        self->carry(from, to, buffer);
                      });
  });
}

void TlsFront::checkDeadline(Clock::time_point now) {
  if (inHandshake() && now - acceptedAt_ > context_.options.handshakeTimeout) {
    refuse(Refusal::kTlsTimeout, fmt::format("({} ms)", context_.options.handshakeTimeout.count()));
  }
}

void TlsFront::refuse(Refusal reason, std::string_view detail) {
  if (!inHandshake()) return;
  context_.refusedHandshakes.fetch_add(1, std::memory_order_relaxed);
  context_.refusals.report(peer_, peerAddress_, reason, detail);
  close();
}

void TlsFront::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  // No close_notify: the peer learns from the closed connection, and a peer that does not read
  // must not hold the shutdown up.
  tls_.lowest_layer().close(ignored);
  inner_.close(ignored);
  // Once handed over, the gate or session on the other end counts the connection and closes it
  // when it sees this end closed.
  if (!handedOver_) {
    --context_.tlsHandshakes;
    context_.connections.fetch_sub(1, std::memory_order_relaxed);
  }
  leave();
}

void TlsFront::leave() { context_.tlsFronts.erase(this); }

}  // namespace ddprun::rendezvous
