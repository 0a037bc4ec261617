#include "auth/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace ddprun::rendezvous::auth {
namespace {

constexpr std::string_view kServerLabel = "ddprun-auth-1 server";
constexpr std::string_view kClientLabel = "ddprun-auth-1 client";

std::string_view view(const Nonce& nonce) {
  return {reinterpret_cast<const char*>(nonce.data()), nonce.size()};
}

// HMAC-SHA256(secret, label | first | second).
std::string proofOf(const JobSecret& secret, std::string_view label, std::string_view first,
                    std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.bytes().data(), static_cast<int>(secret.bytes().size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &length) == nullptr ||
      length != kProofBytes) {
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  }
  return {reinterpret_cast<const char*>(digest), length};
}

bool sameBytes(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

Nonce freshNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw std::runtime_error("OpenSSL's random generator failed (RAND_bytes)");
  }
  return nonce;
}

ClientHandshake::ClientHandshake(const JobSecret& secret, std::optional<Nonce> nonce)
    : secret_(secret), nonce_(nonce ? *nonce : freshNonce()) {}

std::string ClientHandshake::hello() const {
  std::string hello(kMagic);
  hello.append(view(nonce_));
  return hello;
}

ClientHandshake::Verdict ClientHandshake::answer(std::string_view challenge,
                                                 std::string& proof) const {
  if (challenge.size() != kServerChallengeBytes || !challenge.starts_with(kMagic)) {
    return Verdict::kNotAChallenge;
  }
  const std::string_view serverNonce = challenge.substr(kMagic.size(), kNonceBytes);
  const std::string_view serverProof = challenge.substr(kMagic.size() + kNonceBytes);
  if (!sameBytes(serverProof, proofOf(secret_, kServerLabel, view(nonce_), serverNonce))) {
    return Verdict::kWrongSecret;
  }
  proof = proofOf(secret_, kClientLabel, serverNonce, view(nonce_));
  return Verdict::kAccepted;
}

ServerHandshake::ServerHandshake(const JobSecret& secret, std::optional<Nonce> nonce)
    : secret_(secret), nonce_(nonce ? *nonce : freshNonce()) {}

bool ServerHandshake::mayBeHello(std::string_view received) {
  const std::size_t compared = std::min(received.size(), kMagic.size());
  return received.substr(0, compared) == kMagic.substr(0, compared);
}

std::optional<std::string> ServerHandshake::challenge(std::string_view hello) {
  if (hello.size() != kClientHelloBytes || !hello.starts_with(kMagic)) return std::nullopt;
  const std::string_view clientNonce = hello.substr(kMagic.size());
  std::string reply(kMagic);
  reply.append(view(nonce_));
  reply.append(proofOf(secret_, kServerLabel, clientNonce, view(nonce_)));
  expectedProof_ = proofOf(secret_, kClientLabel, view(nonce_), clientNonce);
  return reply;
}

bool ServerHandshake::verify(std::string_view proof) const {
  return !expectedProof_.empty() && sameBytes(proof, expectedProof_);
}

}  // namespace ddprun::rendezvous::auth
