// ClientSocket: one blocking TCP connection with deadlines, for TcpStore; optionally TLS (OpenSSL
// on the same blocking socket, so the deadlines hold for it alike).
//
// Plain POSIX sockets on purpose: a store client is strictly request/response, so a blocking
// socket costs one syscall per send and per reply, with no event loop to own or feed. Deadlines
// are enforced with SO_RCVTIMEO, re-armed only when the remaining time differs from the armed
// value, so an ordinary call costs no extra syscalls.
//
// Not thread-safe; TcpStore serialises access.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct ssl_st;      // OpenSSL's SSL
struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace ddprun::rendezvous::detail {

// Any I/O failure. TcpStore adds the store's address and the operation to the message.
class SocketError : public std::runtime_error {
 public:
  // `systemError`: the errno behind it (0 when it is not a system call's failure).
  explicit SocketError(const std::string& message, int systemError = 0)
      : std::runtime_error(message), systemError_(systemError) {}
  int systemError() const { return systemError_; }

 private:
  int systemError_;
};
// The TLS handshake failed: retrying will not help, the store or the job's TLS files must change.
class TlsHandshakeError : public SocketError {
 public:
  enum class Kind {
    kUntrusted,  // the store's certificate is not signed by the job's CA
    kNotTls,     // what answers does not complete a TLS handshake (a store without TLS)
  };
  TlsHandshakeError(const std::string& message, Kind kind) : SocketError(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};
// A read ran into its deadline; nothing is known to be wrong with the connection.
class SocketTimeout : public SocketError {
 public:
  using SocketError::SocketError;
};

class ClientSocket {
 public:
  using Clock = std::chrono::steady_clock;

  // One attempt: resolves `host` and tries its addresses in order until one connects, each bounded
  // by `deadline`. Throws SocketError with the reason of the last failure.
  static std::unique_ptr<ClientSocket> connect(const std::string& host, std::uint16_t port,
                                               Clock::time_point deadline);
  ~ClientSocket();
  ClientSocket(const ClientSocket&) = delete;
  ClientSocket& operator=(const ClientSocket&) = delete;

  // Runs a TLS handshake (as the client of `context`) by `deadline`; every byte after it is
  // encrypted. Throws TlsHandshakeError, or SocketError when the connection fails meanwhile.
  void startTls(ssl_ctx_st* context, Clock::time_point deadline);

  // Blocks until every byte is handed to the kernel (bounded by SO_SNDTIMEO = `sendTimeout`).
  void sendAll(std::string_view bytes);
  void setSendTimeout(std::chrono::milliseconds timeout);

  void readExact(void* destination, std::size_t size, Clock::time_point deadline);
  // Whether the peer has sent bytes not read yet (without waiting; also after it closed).
  bool peerSentBytes();
  std::uint8_t readU8(Clock::time_point deadline);
  std::uint32_t readU32(Clock::time_point deadline);
  std::int64_t readI64(Clock::time_point deadline);
  // A uint64 length then that many bytes; a length over `maxBytes` is a SocketError.
  std::string readBlob(std::size_t maxBytes, Clock::time_point deadline);

 private:
  explicit ClientSocket(int fd);
  // recv() into `destination`, honouring `deadline`; returns the byte count (> 0).
  std::size_t receiveSome(char* destination, std::size_t size, Clock::time_point deadline);
  void armReceiveTimeout(Clock::duration remaining);

  int fd_;
  ssl_st* tls_ = nullptr;  // after startTls(): every byte goes through it
  std::vector<char> buffer_;  // bytes received but not consumed yet: [begin_, end_)
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  Clock::duration armedTimeout_{0};  // current SO_RCVTIMEO; 0 = not armed (blocks forever)
};

}  // namespace ddprun::rendezvous::detail
