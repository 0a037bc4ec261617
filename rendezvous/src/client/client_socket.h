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

#include <signal.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct ssl_st;      // OpenSSL's SSL
struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct bio_st;      // OpenSSL's BIO

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
// The host name did not resolve (getaddrinfo failed): TcpStore tells it apart by this type.
class ResolveError : public SocketError {
 public:
  using SocketError::SocketError;
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
// A reply announced a value over the reader's limit: the value was not read, so the connection
// is mid-reply and cannot be used again.
class SocketValueTooLarge : public SocketError {
 public:
  SocketValueTooLarge(const std::string& message, std::uint64_t bytes, std::size_t limit)
      : SocketError(message), bytes_(bytes), limit_(limit) {}
  std::uint64_t bytes() const { return bytes_; }
  std::size_t limit() const { return limit_; }

 private:
  std::uint64_t bytes_;
  std::size_t limit_;
};

// OpenSSL writes with write(2), which raises SIGPIPE when the peer has closed: that kills a
// process that does not ignore it. While one of these lives, SIGPIPE is blocked on this thread
// (the kernel sends it to the writing thread), and one raised meanwhile is taken back before the
// old mask returns. For the TLS handshake, where a peer that is no store hangs up; the data after
// it is written by processes that ignore SIGPIPE (tcp_store.h), at no cost per call.
class SigpipeBlocked {
 public:
  SigpipeBlocked();
  ~SigpipeBlocked();
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t old_{};
  bool wasPending_ = false;
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
  std::uint8_t readU8(Clock::time_point deadline);
  std::uint32_t readU32(Clock::time_point deadline);
  std::int64_t readI64(Clock::time_point deadline);
  // A uint64 length then that many bytes; a length over `maxBytes` is a SocketError.
  std::string readBlob(std::size_t maxBytes, Clock::time_point deadline);

  // --- Telling what answers when a handshake fails (client/store_handshake.h).
  // The first bytes the peer sent on this connection (at most kKeptBytes), as they came off the
  // wire: also those OpenSSL read in a TLS handshake, and those read but not consumed yet.
  static constexpr std::size_t kKeptBytes = 256;
  const std::string& received() const { return received_; }
  // Writes `bytes` on the socket itself, past TLS: for a probe of a peer that failed the handshake.
  void sendPlain(std::string_view bytes);
  // Waits until the peer sends more bytes, closes, or `deadline` passes (a deadline now: only what
  // has arrived already), keeping what it sends in received(); past TLS, as sendPlain(). Returns
  // whether anything new arrived.
  bool receivePlain(Clock::time_point deadline);

 private:
  explicit ClientSocket(int fd);
  // recv() into `destination`, honouring `deadline`; returns the byte count (> 0).
  std::size_t receiveSome(char* destination, std::size_t size, Clock::time_point deadline);
  void armReceiveTimeout(Clock::duration remaining);
  void keep(const char* bytes, std::size_t size);
  // OpenSSL's read callback on the socket BIO: keeps what a TLS handshake reads
  // (BIO_callback_fn_ex).
  static long keepTlsReads(bio_st* bio, int operation, const char* data, std::size_t length, int,
                           long, int result, std::size_t* processed);

  int fd_;
  ssl_st* tls_ = nullptr;     // after startTls(): every byte goes through it
  std::vector<char> buffer_;  // bytes received but not consumed yet: [begin_, end_)
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  Clock::duration armedTimeout_{0};  // current SO_RCVTIMEO; 0 = not armed (blocks forever)
  std::string received_;             // received(): the first kKeptBytes bytes from the peer
};

}  // namespace ddprun::rendezvous::detail
