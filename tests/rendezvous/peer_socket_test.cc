// What this kernel's socket diagnostics really say of a relay's peers (relay/peer_user.h), on real
// loopback sockets: a live client, one that half-closed, and issue #18's case, a client that sent
// its bytes and closed before its connection was accepted, whose socket is then a mini-socket.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "relay/peer_user.h"

using namespace ddprun::rendezvous;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

struct Listener {
  asio::io_context io;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  tcp::endpoint endpoint() const { return acceptor.local_endpoint(); }
  tcp::socket accept() { return acceptor.accept(); }
};

// A client socket connected to `where`, as a plain descriptor (closed by the test).
int connectTo(const tcp::endpoint& where) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(where.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

PeerLookup lookUp(PeerSocketTable& table, const tcp::socket& accepted) {
  return table.connectingSocket(accepted.local_endpoint(), accepted.remote_endpoint());
}

}  // namespace

TEST_CASE("relay peers: a live client of this user is found, held and served", "[relay][peer]") {
  Listener listener;
  PeerSocketTable table(listener.endpoint());
  const int client = connectTo(listener.endpoint());
  tcp::socket accepted = listener.accept();
  const PeerLookup lookup = lookUp(table, accepted);
  REQUIRE(lookup.outcome == PeerLookup::Outcome::kFound);
  CHECK(lookup.socket.state == TcpState::kEstablished);
  CHECK(lookup.socket.inode != 0);
  CHECK(lookup.socket.uid == ::geteuid());
  CHECK(admitPeer(lookup, ::geteuid()).verdict == PeerVerdict::kAdmit);
  // Another user's view of the same socket: refused.
  CHECK(admitPeer(lookup, ::geteuid() + 1).verdict == PeerVerdict::kOtherUser);

  // Half-closed, still held: FIN_WAIT2 once the FIN is acknowledged (at once on loopback).
  REQUIRE(::shutdown(client, SHUT_WR) == 0);
  PeerLookup half;
  for (int i = 0; i < 100; ++i) {
    half = lookUp(table, accepted);
    if (half.outcome != PeerLookup::Outcome::kFound || half.socket.state != TcpState::kFinWait1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(half.outcome == PeerLookup::Outcome::kFound);
  CHECK(half.socket.state == TcpState::kFinWait2);
  CHECK(half.socket.inode == lookup.socket.inode);
  CHECK(admitPeer(half, ::geteuid()).verdict == PeerVerdict::kAdmit);
  ::close(client);
}

TEST_CASE("relay peers: a client that sent and closed before the accept is gone (issue #18)",
          "[relay][peer]") {
  Listener listener;
  PeerSocketTable table(listener.endpoint());
  const int client = connectTo(listener.endpoint());
  const char request[] = "SET that nobody is left to own";
  REQUIRE(::send(client, request, sizeof request, 0) == static_cast<ssize_t>(sizeof request));
  ::close(client);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the FIN and its ACK
  tcp::socket accepted = listener.accept();  // the bytes are still queued on this side
  const PeerLookup lookup = lookUp(table, accepted);
  INFO("outcome " << static_cast<int>(lookup.outcome) << ", state "
                  << tcpStateName(lookup.socket.state) << ", inode " << lookup.socket.inode
                  << ", uid " << lookup.socket.uid);
  if (lookup.outcome == PeerLookup::Outcome::kFound) {
    // The mini-socket: what made the old relay take these bytes for root's.
    CHECK(lookup.socket.inode == 0);
  } else {
    CHECK(lookup.outcome == PeerLookup::Outcome::kNoSuchSocket);
  }
  const PeerAdmission admission = admitPeer(lookup, ::geteuid());
  CHECK(admission.verdict == PeerVerdict::kGone);
  CHECK(admitPeer(lookup, 0).verdict == PeerVerdict::kGone);  // an agent running as root too
}

TEST_CASE("relay peers: a port pair with no socket is no such socket, not a failure",
          "[relay][peer]") {
  Listener listener;
  PeerSocketTable table(listener.endpoint());
  // A port nobody connects from: bound, then closed, so it is free.
  std::uint16_t unused = 0;
  {
    asio::io_context io;
    tcp::acceptor probe(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    unused = probe.local_endpoint().port();
  }
  const tcp::endpoint peer(asio::ip::address_v4::loopback(), unused);
  const PeerLookup lookup = table.connectingSocket(listener.endpoint(), peer);
  CHECK(lookup.outcome == PeerLookup::Outcome::kNoSuchSocket);
  CHECK(admitPeer(lookup, ::geteuid()).verdict == PeerVerdict::kGone);
}
