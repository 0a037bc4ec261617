// What a client tells about the peer when the store handshake fails (TcpStore::connect): the
// handshake's pieces it shares with the probes, what a reply's first bytes look like, and the
// probes that ask a peer which closed the handshake without a byte what it is.
//
// Why probes: a peer that closes at the first byte may be a ddprun store of another setting (one
// with a token closes at a VALIDATE, one without at a token hello, one with TLS at both), a
// full store, or no store at all (a port that accepts and closes). Each setting answers one opening
// at once: a token store a hello with its challenge, an open store a PING with its echo, a TLS
// store a TLS hello. So the client asks the openings it did not send, on fresh connections, and
// names what answers instead of guessing. Each probe is an opening some ddprun store answers, and
// none carries a secret.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/client_socket.h"
#include "ddprun/rendezvous/errors.h"

namespace ddprun::rendezvous::detail {

// What a client's handshake sends first: what the probes need not ask again.
enum class Opening {
  kTls,         // a TLS hello (the client has TLS files)
  kTokenHello,  // the token hello (the client has a token)
  kValidate,    // torch 2.x's VALIDATE and PING
};

// torch 2.x's VALIDATE, then a PING carrying `nonce`, in separate writes as torch's client sends
// them (the libuv server rejects a VALIDATE split from its magic).
void sendValidateAndPing(ClientSocket& socket, std::uint32_t nonce);
// The bytes a store answers that PING with.
std::string pingEcho(std::uint32_t nonce);

// What a peer is, by the first bytes it sent that no store sends.
StoreHandshakeError::Peer recognise(std::string_view bytes);
// Those bytes as a message shows them: the first line, at most 64 bytes, escaped
// (common::printable over valid UTF-8): they come from the network.
std::string shownBytes(std::string_view bytes);

// What the peer did to a handshake that failed, after it had sent `answered` bytes of replies a
// store sends and was expected to begin its next reply with `expected` (empty: a TLS handshake).
enum class Sighting {
  kClosed,   // closed (or reset) without a byte
  kSilent,   // sent nothing by the deadline
  kForeign,  // sent bytes no store sends
  kBroken,   // began a store's reply and broke off: a store in trouble, worth another try
};
Sighting sighting(const ClientSocket& socket, const SocketError& error, std::size_t answered,
                  std::string_view expected);

// What the probes found.
enum class Finding {
  kTokenStore,  // answered a token hello with a challenge: a ddprun store with a token
  kOpenStore,   // echoed a PING: a store without a token
  kTlsStore,    // completed a TLS handshake and, inside it, answered a token hello
  kTlsOther,    // speaks TLS, but no ddprun store answered inside it
  kForeign,     // answered a probe with bytes no store sends (ProbeResult::bytes)
  kNothing,     // closed (or ignored) every probe
};
struct ProbeResult {
  Finding finding = Finding::kNothing;
  std::string bytes;  // with kForeign: what it sent
};
// Asks host:port the openings other than `asked`, each on a fresh connection within `patience`,
// and stops at the first that tells.
ProbeResult probe(const std::string& host, std::uint16_t port, Opening asked,
                  std::chrono::milliseconds patience);

}  // namespace ddprun::rendezvous::detail
