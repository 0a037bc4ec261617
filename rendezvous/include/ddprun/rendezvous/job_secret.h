// JobSecret: the token that admits a connection to a job's store (docs/security.md). The agents
// and ddprun-rendezvous read it from a token file; it never travels on the wire, only HMACs made
// with it do (rendezvous/src/auth/handshake.h).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace ddprun::rendezvous {

// The token file cannot be used: one line naming the file, what is wrong and the fix.
class TokenFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JobSecret {
 public:
  // Fewer bytes than this are refused: a short token can be guessed offline from one recorded
  // handshake (HMAC-SHA256 over known nonces).
  static constexpr std::size_t kMinBytes = 16;

  // Throws TokenFileError (naming `origin`) when `bytes` is shorter than kMinBytes.
  static JobSecret fromBytes(std::string bytes, const std::string& origin = "the token");
  const std::string& bytes() const { return bytes_; }

 private:
  explicit JobSecret(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

// Reads the secret in `path`: a regular file that only its owner may read or write (a mode such as
// 600; anything readable by group or others is refused, as ssh refuses such a key), holding at
// least kMinBytes bytes once trailing whitespace (the newline an editor adds) is removed.
// Throws TokenFileError.
JobSecret readTokenFile(const std::string& path);

}  // namespace ddprun::rendezvous
