#include "client/store_handshake.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <random>

#include "auth/handshake.h"
#include "auth/tls_peer.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/tls.h"
#include "protocol/wire.h"

namespace ddprun::rendezvous::detail {
namespace {

using Clock = ClientSocket::Clock;
using Peer = StoreHandshakeError::Peer;

// A TLS record header: content type (0x14-0x17: change cipher spec, alert, handshake, data),
// then major version 3.
bool looksLikeTls(std::string_view bytes) {
  if (bytes.empty()) return false;
  const auto type = static_cast<unsigned char>(bytes[0]);
  return type >= 0x14 && type <= 0x17 && (bytes.size() < 2 || bytes[1] == '\x03');
}

// Whether the first bytes of `got` and `expected` agree (as far as both go).
bool agrees(std::string_view got, std::string_view expected) {
  const std::size_t n = std::min(got.size(), expected.size());
  return got.substr(0, n) == expected.substr(0, n);
}

std::string tokenHello() {
  const auth::Nonce nonce = auth::freshNonce();
  std::string hello(auth::kMagic);
  hello.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  return hello;
}

// Receives on a probe connection until `enough` bytes came, the peer closed, or `deadline`.
void receiveUpTo(ClientSocket& socket, std::size_t enough, Clock::time_point deadline) {
  while (socket.received().size() < enough && socket.receivePlain(deadline)) {
  }
}

// Foreign bytes found by a probe, or nothing.
ProbeResult foreignOrNothing(const std::string& bytes) {
  if (bytes.empty()) return {};
  return {looksLikeTls(bytes) ? Finding::kTlsOther : Finding::kForeign, bytes};
}

ProbeResult askTokenHello(ClientSocket& socket, Clock::time_point deadline) {
  socket.sendPlain(tokenHello());
  receiveUpTo(socket, auth::kMagic.size(), deadline);
  const std::string& got = socket.received();
  if (got.size() >= auth::kMagic.size() && got.starts_with(auth::kMagic))
    return {Finding::kTokenStore, {}};
  return foreignOrNothing(got);
}

ProbeResult askPing(ClientSocket& socket, Clock::time_point deadline) {
  const auto nonce = static_cast<std::uint32_t>(std::random_device{}());
  sendValidateAndPing(socket, nonce);
  const std::string echo = pingEcho(nonce);
  receiveUpTo(socket, echo.size(), deadline);
  if (socket.received() == echo) return {Finding::kOpenStore, {}};
  return foreignOrNothing(socket.received());
}

ProbeResult askTls(ClientSocket& socket, Clock::time_point deadline) {
  const SigpipeBlocked quiet;
  try {
    socket.startTls(auth::probeContext(), deadline);
  } catch (const TlsError&) {
    return {};  // no context to ask with: nothing found
  } catch (const SocketError&) {
    return foreignOrNothing(socket.received());
  }
  // TLS: is a ddprun store inside it?
  try {
    socket.sendAll(tokenHello());
    std::string magic(auth::kMagic.size(), '\0');
    socket.readExact(magic.data(), magic.size(), deadline);
    if (magic == auth::kMagic) return {Finding::kTlsStore, {}};
  } catch (const SocketError&) {
  }
  return {Finding::kTlsOther, {}};
}

}  // namespace

void sendValidateAndPing(ClientSocket& socket, std::uint32_t nonce) {
  std::string frame;
  protocol::putU8(frame, *protocol::wireCode(WireDialect::kTorch2, protocol::Op::kValidate));
  protocol::putU32(frame, protocol::kValidationMagic);
  socket.sendAll(frame);
  frame.clear();
  protocol::putU8(frame, *protocol::wireCode(WireDialect::kTorch2, protocol::Op::kPing));
  protocol::putU32(frame, nonce);
  socket.sendAll(frame);
}

std::string pingEcho(std::uint32_t nonce) {
  std::string echo;
  protocol::putU32(echo, nonce);
  return echo;
}

Peer recognise(std::string_view bytes) {
  // An HTTP/1.x status line, or a bare HTML page: what a server sends a request it cannot parse
  // when it takes it for HTTP/0.9, as Python's http.server does.
  std::string head(bytes.substr(0, 14));
  std::transform(head.begin(), head.end(), head.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (head.starts_with("http/") || head.starts_with("<!doctype html") ||
      head.starts_with("<html")) {
    return Peer::kHttpServer;
  }
  if (bytes.starts_with("SSH-")) return Peer::kSshServer;
  if (looksLikeTls(bytes)) return Peer::kTlsServer;
  return Peer::kOtherBytes;
}

std::string shownBytes(std::string_view bytes) {
  constexpr std::size_t kShown = 64;
  std::string_view line = bytes.substr(0, std::min(bytes.find('\n'), kShown));
  const bool cut = line.size() < bytes.size() && bytes[line.size()] != '\n';
  if (line.ends_with('\r')) line.remove_suffix(1);
  return common::printable(common::validUtf8(line)) + (cut ? "..." : "");
}

Sighting sighting(const ClientSocket& socket, const SocketError& error, std::size_t answered,
                  std::string_view expected) {
  const std::string_view got =
      std::string_view(socket.received()).substr(std::min(answered, socket.received().size()));
  if (got.empty()) {
    return dynamic_cast<const SocketTimeout*>(&error) != nullptr ? Sighting::kSilent
                                                                 : Sighting::kClosed;
  }
  // In a TLS handshake (nothing expected) any bytes are foreign: a TLS store of the job either
  // completes it or is refused for its certificate, which the caller tells first.
  return !expected.empty() && agrees(got, expected) ? Sighting::kBroken : Sighting::kForeign;
}

ProbeResult probe(const std::string& host, std::uint16_t port, Opening asked,
                  std::chrono::milliseconds patience) {
  using Ask = ProbeResult (*)(ClientSocket&, Clock::time_point);
  const std::pair<Opening, Ask> openings[] = {
      {Opening::kTokenHello, &askTokenHello},
      {Opening::kValidate, &askPing},
      {Opening::kTls, &askTls},
  };
  for (const auto& [opening, ask] : openings) {
    if (opening == asked) continue;
    const auto deadline = Clock::now() + patience;
    std::unique_ptr<ClientSocket> socket;
    try {
      socket = ClientSocket::connect(host, port, deadline);
    } catch (const SocketError&) {
      continue;  // gone meanwhile: the others may still tell
    }
    ProbeResult found;
    try {
      found = ask(*socket, deadline);
    } catch (const SocketError&) {
      // Closed while it was asked (a send broke): what it said before that still tells.
      socket->receivePlain(Clock::now());
      found = foreignOrNothing(socket->received());
    }
    if (found.finding != Finding::kNothing) return found;
  }
  return {};
}

}  // namespace ddprun::rendezvous::detail
