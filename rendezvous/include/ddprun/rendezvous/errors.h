// The exceptions Store implementations throw. docs/errors.md describes the whole error model.
#pragma once

#include <stdexcept>
#include <string>

namespace ddprun::rendezvous {

// Base of every store failure. what() is one line that names the store (host:port for TCP),
// the operation and the key where there is one.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A blocking call (get, wait, barrier) gave up after its timeout. The store stays usable.
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The store could not be reached, or the connection broke or was closed by the server mid-call.
// The outcome of the call is unknown; the next call reconnects.
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};

// Something answers at the address but drops the torch 2.x handshake: it is not a ddprun or
// torch 2.x store (a torch 1.13 server, another service). Waiting longer will not help.
class StoreHandshakeError : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};

// The token handshake (auth/handshake.h) or the TLS handshake failed: waiting or retrying will not
// help, the token, the TLS files or the address must change. what() says which.
class StoreAuthError : public StoreHandshakeError {
 public:
  enum class Code {
    kWrongToken,  // the store holds a different token than this client
    kNoToken,     // the store answered the token hello as no token-holding ddprun store does
    kUntrustedCertificate,  // TLS: the store's certificate is not signed by the job's CA
    kNoTls,                 // TLS: the store does not complete a TLS handshake
  };
  StoreAuthError(const std::string& message, Code code) : StoreHandshakeError(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// The operation does not exist in this backend or wire dialect (e.g. listKeys over torch 1.13).
class StoreUnsupportedError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddprun::rendezvous
