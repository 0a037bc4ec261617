// RelayLink: one worker connection of a LoopbackRelay and the upstream connection that carries it
// to the store: connect (to the addresses the relay resolved once per round), with TLS run its
// handshake and check the store's certificate, prove the token (auth/handshake.h), then copy bytes
// both ways unchanged until either side closes, which closes both.
//
// Or one handoff (relay_handoff_wire.h): the same connection to the store, made and proven the same
// way, but then given whole to the worker that asked on the handoff socket, which talks to the
// store directly; the link ends there. Never with TLS: the TLS session lives in this process.
//
// Lives on the relay's event-loop thread.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "auth/handshake.h"

namespace ddprun::rendezvous {

class RelayLink final : public std::enable_shared_from_this<RelayLink> {
 public:
  // How a link ended, for the relay's log and stats.
  enum class End {
    kClosed,       // relayed, then either side closed
    kUnreachable,  // the store could not be reached (or did not answer) within the timeout
    kWrongToken,   // the store holds another token
    kNoToken,      // the store did not answer the token hello as a token-holding store does
    kUntrusted,    // TLS: the store's certificate is not signed by the job's CA
    kNoTls,        // TLS: the store did not complete a TLS handshake
    kHandedOff,    // a handoff: the proven connection went to the worker
  };
  using OnEnd = std::function<void(RelayLink*, End, const std::string& detail)>;

  // `store`: the store's addresses, tried in order; `upstream` names it in messages. `tls`: the
  // client context the upstream connection runs TLS with, or null for none.
  RelayLink(boost::asio::ip::tcp::socket worker, std::vector<boost::asio::ip::tcp::endpoint> store,
            std::string upstream, const JobSecret& secret, boost::asio::ssl::context* tls,
            std::chrono::milliseconds connectTimeout, OnEnd onEnd);
  // A handoff for the worker that connected to the handoff socket as `requester` (no TLS).
  RelayLink(boost::asio::local::stream_protocol::socket requester,
            std::vector<boost::asio::ip::tcp::endpoint> store, std::string upstream,
            const JobSecret& secret, std::chrono::milliseconds connectTimeout, OnEnd onEnd);

  void start();
  // Closes both connections (the relay is stopping). Idempotent.
  void close() { finish(End::kClosed, ""); }

 private:
  using Buffer = std::array<char, 64 * 1024>;

  using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>;

  void onConnected(const boost::system::error_code& error);
  void onTlsHandshake(const boost::system::error_code& error);
  void sendHello();
  void onChallenge(const boost::system::error_code& error);
  void onProofSent(const boost::system::error_code& error);
  // Sends the proven store connection to the requester, then ends the link.
  void handOff();
  // Calls `operation` with the stream to the store: the TLS one, or the socket itself.
  template <typename Operation>
  void withUpstream(Operation&& operation);
  // Copies what `from` sends to `to`, one buffer at a time, until either fails.
  template <typename From, typename To>
  void pump(From& from, To& to, Buffer& buffer);
  void finish(End end, const std::string& detail);

  boost::asio::ip::tcp::socket worker_;  // never opened in a handoff
  std::optional<boost::asio::local::stream_protocol::socket> requester_;  // a handoff's only
  boost::asio::ip::tcp::socket store_;
  boost::asio::ssl::context* tlsContext_;
  std::optional<TlsStream> tls_;  // over store_, once connected, with a TLS context
  boost::asio::steady_timer deadline_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::string upstream_;
  std::chrono::milliseconds connectTimeout_;
  auth::ClientHandshake handshake_;
  std::string hello_;
  std::string challenge_;
  std::string proof_;
  OnEnd onEnd_;
  // Left uninitialised: zeroing 128 KiB per worker connection, and faulting in every page of it,
  // was a tenth of the relay's time in a 1,024-connection barrier; reads touch only what arrives.
  Buffer toStore_;
  Buffer toWorker_;
  bool finished_ = false;
};

}  // namespace ddprun::rendezvous
