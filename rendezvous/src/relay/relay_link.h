// RelayLink: one worker connection of a LoopbackRelay and the upstream connection that carries it
// to the store: connect (to the addresses the relay resolved once per round), prove the token (auth/handshake.h), then copy bytes both ways
// unchanged until either side closes, which closes both.
//
// Lives on the relay's event-loop thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

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
  };
  using OnEnd = std::function<void(RelayLink*, End, const std::string& detail)>;

  // `store`: the store's addresses, tried in order; `upstream` names it in messages.
  RelayLink(boost::asio::ip::tcp::socket worker, std::vector<boost::asio::ip::tcp::endpoint> store,
            std::string upstream, const JobSecret& secret, std::chrono::milliseconds connectTimeout,
            OnEnd onEnd);

  void start();
  // Closes both connections (the relay is stopping). Idempotent.
  void close() { finish(End::kClosed, ""); }

 private:
  using Buffer = std::array<char, 64 * 1024>;

  void onConnected(const boost::system::error_code& error);
  void onChallenge(const boost::system::error_code& error);
  void onProofSent(const boost::system::error_code& error);
  // Copies what `from` sends to `to`, one buffer at a time, until either fails.
  void pump(boost::asio::ip::tcp::socket& from, boost::asio::ip::tcp::socket& to, Buffer& buffer);
  void finish(End end, const std::string& detail);

  boost::asio::ip::tcp::socket worker_;
  boost::asio::ip::tcp::socket store_;
  boost::asio::steady_timer deadline_;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  std::string upstream_;
  std::chrono::milliseconds connectTimeout_;
  auth::ClientHandshake handshake_;
  std::string hello_;
  std::string challenge_;
  std::string proof_;
  OnEnd onEnd_;
  Buffer toStore_{};
  Buffer toWorker_{};
  bool finished_ = false;
};

}  // namespace ddprun::rendezvous
