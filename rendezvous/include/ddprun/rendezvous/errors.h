// The exceptions Store implementations throw. docs/errors.md describes the whole error model.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The store's host name did not resolve on the last attempt: a name that may still appear (a
// Kubernetes pod's service name comes up to ~30 s after the pod), so a caller may wait for it
// longer than for a store that is merely not up yet. An address literal never gives this.
class StoreUnresolvedError : public StoreConnectionError {
 public:
  using StoreConnectionError::StoreConnectionError;
};

// Something answers at the address but fails the store's handshake: waiting or retrying will not
// help, the address (or the client's token or TLS files) must change. peer() says what answers,
// as far as the handshake and a few probes on fresh connections tell (docs/errors.md), so that a
// caller decides on it and never on the message.
class StoreHandshakeError : public StoreConnectionError {
 public:
  enum class Peer {
    kStore,  // a ddprun store whose token or TLS does not match this client's: a StoreAuthError
    kHttpServer,    // answers "HTTP/...": a web server, an etcd's HTTP port, a proxy
    kSshServer,     // greets with "SSH-..."
    kTlsServer,     // speaks TLS, but no ddprun store answers inside it
    kOtherBytes,    // answers with bytes no store sends, of no protocol recognised
    kSilent,        // accepts connections and answers nothing, not even to a line end
    kClosesAtOnce,  // accepts connections and closes them without a byte, whatever is sent
                    // (a ddprun store does that only at its connection limit, and logs it)
  };
  StoreHandshakeError(const std::string& message, Peer peer)
      : StoreConnectionError(message), peer_(peer) {}
  Peer peer() const { return peer_; }

 private:
  Peer peer_;
};

// The token handshake (auth/handshake.h) or the TLS handshake failed against a ddprun store: the
// token, the TLS files or the address must change. what() says which.
class StoreAuthError : public StoreHandshakeError {
 public:
  enum class Code {
    kWrongToken,            // the store holds a different token than this client
    kNoToken,               // the store runs without a token, and this client has one
    kTokenRequired,         // the store wants a token, and this client has none
    kUntrustedCertificate,  // TLS: the store's certificate is not signed by the job's CA
    kNoTls,                 // TLS: the store does not complete a TLS handshake (it has no TLS)
    kTlsRequired,           // the store serves TLS, and this client has no TLS files
    kUserRefused,           // a store with users (an etcd with auth) refuses this client's user
                            // name and password
    kUserRequired,          // a store with users (an etcd with auth) wants one, and this client
                            // has none
  };
  StoreAuthError(const std::string& message, Code code)
      : StoreHandshakeError(message, Peer::kStore), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// A reply held a value over the client's limit (TcpStoreOptions::maxReplyValueBytes): the client
// closed the connection rather than read the value (the next call reconnects). The store and the
// other keys are fine: a reader of values others write (`ddprun status`) sets the one key aside.
class StoreValueTooLargeError : public StoreConnectionError {
 public:
  StoreValueTooLargeError(const std::string& message, std::uint64_t bytes, std::size_t limit)
      : StoreConnectionError(message), bytes_(bytes), limit_(limit) {}
  // The value's size as the reply announced it, and the client's limit.
  std::uint64_t bytes() const { return bytes_; }
  std::size_t limit() const { return limit_; }

 private:
  std::uint64_t bytes_;
  std::size_t limit_;
};

// The operation does not exist in this backend or wire dialect (e.g. listKeys over torch 1.13).
class StoreUnsupportedError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddprun::rendezvous
