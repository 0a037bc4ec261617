// The token handshake that opens every connection to a store that has a JobSecret: a
// challenge-response in which each side proves it holds the secret, which never travels. After it,
// the connection carries the torch TCPStore protocol unchanged (either dialect).
//
//   client -> server   ClientHello      "ddpAUTH1" | client nonce (32)                     40 bytes
//   server -> client   ServerChallenge  "ddpAUTH1" | server nonce (32) | server proof (32)  72
//   bytes client -> server   ClientProof      client proof (32)                                  32
//   bytes
//
//   server proof = HMAC-SHA256(secret, "ddprun-auth-1 server" | client nonce | server nonce)
//   client proof = HMAC-SHA256(secret, "ddprun-auth-1 client" | server nonce | client nonce)
//
// Both nonces are fresh random bytes from OpenSSL, so a recorded exchange proves nothing on a new
// connection (replay fails), and the two proofs carry different labels, so neither side's proof can
// be reflected back as the other's. The server proves itself first: a client with the wrong token
// learns it from the challenge and can say so, instead of seeing a silently closed connection.
// The server sends nothing to a peer whose first bytes are not a hello, and closes a connection
// whose proof is wrong without a reply. The magic's first byte is no op code of either torch
// dialect, so a store without a token rejects a hello at once (the client then reports that).
//
// Pure logic over byte strings: the blocking client (TcpStore), the server's gate and the relay's
// upstream use it alike. docs/security.md describes the handshake and the threat model.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/job_secret.h"

namespace ddprun::rendezvous::auth {

inline constexpr std::string_view kMagic = "ddpAUTH1";
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;  // SHA-256
inline constexpr std::size_t kClientHelloBytes = kMagic.size() + kNonceBytes;
inline constexpr std::size_t kServerChallengeBytes = kMagic.size() + kNonceBytes + kProofBytes;
inline constexpr std::size_t kClientProofBytes = kProofBytes;

using Nonce = std::array<unsigned char, kNonceBytes>;

// Fresh random bytes (OpenSSL's CSPRNG). Throws std::runtime_error if it fails.
Nonce freshNonce();

class ClientHandshake {
 public:
  enum class Verdict {
    kAccepted,       // the server holds the same secret; send `proof`
    kNotAChallenge,  // the reply is not a token challenge: no ddprun store with a token there
    kWrongSecret,    // a challenge whose proof does not match: the server holds another token
  };

  // `nonce` is for tests (a fixed one); by default a fresh one.
  explicit ClientHandshake(const JobSecret& secret, std::optional<Nonce> nonce = std::nullopt);

  // The 40-byte ClientHello.
  std::string hello() const;
  // Checks the server's 72-byte challenge; on kAccepted, `proof` holds the 32-byte ClientProof.
  Verdict answer(std::string_view challenge, std::string& proof) const;

 private:
  const JobSecret& secret_;
  Nonce nonce_;
};

class ServerHandshake {
 public:
  explicit ServerHandshake(const JobSecret& secret, std::optional<Nonce> nonce = std::nullopt);

  // False as soon as `received` (the first bytes of a connection, possibly fewer than a whole
  // hello) cannot be the start of a ClientHello: the peer speaks something else.
  static bool mayBeHello(std::string_view received);
  // The 72-byte challenge for a whole 40-byte ClientHello; nothing when it is not a hello.
  std::optional<std::string> challenge(std::string_view hello);
  // Whether the 32-byte ClientProof is right (compared in constant time). Requires challenge().
  bool verify(std::string_view proof) const;

 private:
  const JobSecret& secret_;
  Nonce nonce_;
  std::string expectedProof_;
};

}  // namespace ddprun::rendezvous::auth
