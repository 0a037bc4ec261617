#include "client/client_socket.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auth/tls_peer.h"
#include "protocol/wire.h"

namespace ddprun::rendezvous::detail {
namespace {

using Clock = ClientSocket::Clock;

std::string errnoText(int error) { return std::strerror(error); }

timeval toTimeval(Clock::duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

// Connects one address without blocking past `deadline`. Returns the fd, or -1 with `error` set.
// A blocking connect bounded by SO_SNDTIMEO (Linux applies it to connect) costs three syscalls
// where non-blocking connect + poll + SO_ERROR + two fcntl calls cost six: it matters when
// thousands of ranks connect at once.
int connectAddress(const addrinfo& address, Clock::time_point deadline, int& error) {
  int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) {
    error = errno;
    return -1;
  }
  const timeval limit =
      toTimeval(std::max<Clock::duration>(deadline - Clock::now(), std::chrono::milliseconds(1)));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  int rc;
  do {
    rc = ::connect(fd, address.ai_addr, address.ai_addrlen);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    error = (errno == EINPROGRESS || errno == EAGAIN) ? ETIMEDOUT : errno;
    ::close(fd);
    return -1;
  }
  // Without TCP_NODELAY every small request would wait ~40 ms for Nagle and delayed ACKs.
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

}  // namespace

std::unique_ptr<ClientSocket> ClientSocket::connect(const std::string& host, std::uint16_t port,
                                                    Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // An address literal needs no lookup at all; a name is resolved without AI_ADDRCONFIG, which
  // would hide loopback-only families in network namespaces (every address is tried in turn).
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &addresses);
  if (rc == EAI_NONAME) {
    hints.ai_flags = AI_NUMERICSERV;
    rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &addresses);
  }
  if (rc != 0) {
    throw ResolveError(fmt::format("cannot resolve host '{}': {}", host, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(addresses, &::freeaddrinfo);
  int error = 0;
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    int fd = connectAddress(*a, deadline, error);
    if (fd >= 0) return std::unique_ptr<ClientSocket>(new ClientSocket(fd));
  }
  throw SocketError(errnoText(error), error);
}

ClientSocket::ClientSocket(int fd) : fd_(fd), buffer_(16 * 1024) {}

ClientSocket::~ClientSocket() {
  // No close_notify: the connection ends with the process or on an error, and a peer that stopped
  // reading must not make the destructor block.
  if (tls_ != nullptr)
    ::SSL_free(tls_);  // a plain connection never loads OpenSSL (ddprun: on demand)
  ::close(fd_);
}

SigpipeBlocked::SigpipeBlocked() {
  sigset_t pipe;
  ::sigemptyset(&pipe);
  ::sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  sigset_t pending;
  ::sigpending(&pending);
  wasPending_ = ::sigismember(&pending, SIGPIPE) == 1;
}

SigpipeBlocked::~SigpipeBlocked() {
  sigset_t pending;
  ::sigpending(&pending);
  if (!wasPending_ && ::sigismember(&pending, SIGPIPE) == 1) {
    sigset_t pipe;
    ::sigemptyset(&pipe);
    ::sigaddset(&pipe, SIGPIPE);
    const timespec now{};
    ::sigtimedwait(&pipe, nullptr, &now);
  }
  ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

long ClientSocket::keepTlsReads(BIO* bio, int operation, const char* data, std::size_t, int, long,
                                int result, std::size_t* processed) {
  if (operation == (BIO_CB_READ | BIO_CB_RETURN) && result > 0 && processed != nullptr) {
    auto* socket = reinterpret_cast<ClientSocket*>(::BIO_get_callback_arg(bio));
    socket->keep(data, *processed);
  }
  return result;
}

void ClientSocket::startTls(ssl_ctx_st* context, Clock::time_point deadline) {
  tls_ = ::SSL_new(context);
  if (tls_ == nullptr || ::SSL_set_fd(tls_, fd_) != 1) {
    ::ERR_clear_error();
    throw SocketError("cannot set up TLS on the connection");
  }
  // What the handshake reads is kept, so that a peer that is no TLS store can be told by its bytes
  // (an SSH banner, an HTTP reply); only during the handshake, never the data after it.
  const SigpipeBlocked quiet;
  BIO* wire = ::SSL_get_rbio(tls_);
  ::BIO_set_callback_arg(wire, reinterpret_cast<char*>(this));
  ::BIO_set_callback_ex(wire, &ClientSocket::keepTlsReads);
  for (;;) {
    const Clock::duration remaining = deadline - Clock::now();
    if (remaining <= Clock::duration::zero()) throw SocketTimeout("timed out in the TLS handshake");
    armReceiveTimeout(remaining);
    const int rc = ::SSL_connect(tls_);
    if (rc == 1) {
      ::BIO_set_callback_ex(wire, nullptr);
      return;
    }
    const int error = ::SSL_get_error(tls_, rc);
    const int systemError = errno;
    ::ERR_clear_error();
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) continue;  // SO_RCVTIMEO
    if (const auto refused = auth::refusedCertificate(tls_)) {
      throw TlsHandshakeError(
          fmt::format(
              "the store's TLS certificate is not one the job trusts ({}): give every agent "
              "the store's certificate or its CA (tls_cert, tls_ca)",
              *refused),
          TlsHandshakeError::Kind::kUntrusted);
    }
    if (error == SSL_ERROR_SYSCALL && systemError != 0 && systemError != ECONNRESET &&
        systemError != EPIPE) {
      throw SocketError(fmt::format("TLS handshake: {}", errnoText(systemError)), systemError);
    }
    throw TlsHandshakeError(
        "the store did not complete a TLS handshake: it runs without TLS, or "
        "is not a ddprun store",
        TlsHandshakeError::Kind::kNotTls);
  }
}

void ClientSocket::setSendTimeout(std::chrono::milliseconds timeout) {
  const timeval tv = toTimeval(timeout);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void ClientSocket::sendAll(std::string_view bytes) {
  while (tls_ != nullptr && !bytes.empty()) {
    // Blocking: SSL_write returns once all of it is written, or fails.
    const int sent = ::SSL_write(tls_, bytes.data(),
                                 static_cast<int>(std::min<std::size_t>(bytes.size(), INT32_MAX)));
    if (sent > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(sent));
      continue;
    }
    const int error = ::SSL_get_error(tls_, sent);
    const int systemError = errno;
    ::ERR_clear_error();
    if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) {
      if (systemError == EINTR) continue;
      throw SocketError("send timed out: the server is not reading");
    }
    throw SocketError(error == SSL_ERROR_SYSCALL && systemError != 0
                          ? fmt::format("send failed: {}", errnoText(systemError))
                          : std::string("send failed: the TLS connection broke"));
  }
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        throw SocketError("send timed out: the server is not reading");
      }
      throw SocketError(fmt::format("send failed: {}", errnoText(errno)));
    }
    bytes.remove_prefix(static_cast<std::size_t>(sent));
  }
}

void ClientSocket::armReceiveTimeout(Clock::duration remaining) {
  // Re-arm only when the armed value would overshoot the deadline or is far too short: an
  // ordinary call finds the previous call's value still right and pays no syscall.
  if (armedTimeout_ != Clock::duration::zero() &&
      armedTimeout_ <= remaining + std::chrono::milliseconds(5) && armedTimeout_ * 2 >= remaining) {
    return;
  }
  const timeval tv = toTimeval(std::max<Clock::duration>(remaining, std::chrono::microseconds(1)));
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  armedTimeout_ = remaining;
}

std::size_t ClientSocket::receiveSome(char* destination, std::size_t size,
                                      Clock::time_point deadline) {
  for (;;) {
    const Clock::duration remaining = deadline - Clock::now();
    if (remaining <= Clock::duration::zero()) throw SocketTimeout("timed out waiting for a reply");
    armReceiveTimeout(remaining);
    if (tls_ != nullptr) {
      const int got =
          ::SSL_read(tls_, destination, static_cast<int>(std::min<std::size_t>(size, INT32_MAX)));
      if (got > 0) return static_cast<std::size_t>(got);
      const int error = ::SSL_get_error(tls_, got);
      const int systemError = errno;
      ::ERR_clear_error();
      // WANT_READ: SO_RCVTIMEO ran out (or a signal came) mid-record; the deadline decides.
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) continue;
      if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && systemError == 0)) {
        throw SocketError("the server closed the connection");
      }
      throw SocketError(error == SSL_ERROR_SYSCALL
                            ? fmt::format("receive failed: {}", errnoText(systemError))
                            : std::string("receive failed: the TLS connection broke"));
    }
    const ssize_t got = ::recv(fd_, destination, size, 0);
    if (got > 0) {
      keep(destination, static_cast<std::size_t>(got));
      return static_cast<std::size_t>(got);
    }
    if (got == 0) throw SocketError("the server closed the connection");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    throw SocketError(fmt::format("receive failed: {}", errnoText(errno)));
  }
}

void ClientSocket::readExact(void* destination, std::size_t size, Clock::time_point deadline) {
  char* out = static_cast<char*>(destination);
  const std::size_t buffered = std::min(size, end_ - begin_);
  std::memcpy(out, buffer_.data() + begin_, buffered);
  begin_ += buffered;
  out += buffered;
  size -= buffered;
  while (size > 0) {
    if (size >= buffer_.size() / 2) {
      // Large payloads go straight to their destination.
      const std::size_t got = receiveSome(out, size, deadline);
      out += got;
      size -= got;
      continue;
    }
    const std::size_t got = receiveSome(buffer_.data(), buffer_.size(), deadline);
    begin_ = 0;  // only now: a receive that times out must leave the buffer as it was
    end_ = got;
    const std::size_t take = std::min(size, end_);
    std::memcpy(out, buffer_.data(), take);
    begin_ = take;
    out += take;
    size -= take;
  }
}

void ClientSocket::keep(const char* bytes, std::size_t size) {
  // One comparison per receive once full: an ordinary call pays nothing more.
  if (received_.size() < kKeptBytes) {
    received_.append(bytes, std::min(size, kKeptBytes - received_.size()));
  }
}

void ClientSocket::sendPlain(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return;  // a probe: a peer that takes nothing more has said what it will
    bytes.remove_prefix(static_cast<std::size_t>(sent));
  }
}

bool ClientSocket::receivePlain(Clock::time_point deadline) {
  bool got = false;
  char chunk[512];
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      keep(chunk, static_cast<std::size_t>(n));
      got = true;
      if (received_.size() >= kKeptBytes) return true;  // a peer that streams on is not waited out
      continue;                                         // take what has arrived, then return
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || got) return got;
    const auto remaining =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (remaining <= 0) return false;
    pollfd ready{fd_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(std::min<long long>(remaining, INT32_MAX))) < 0 &&
        errno != EINTR) {
      return false;
    }
  }
}

std::uint8_t ClientSocket::readU8(Clock::time_point deadline) {
  std::uint8_t value;
  readExact(&value, 1, deadline);
  return value;
}

std::uint32_t ClientSocket::readU32(Clock::time_point deadline) {
  unsigned char bytes[4];
  readExact(bytes, sizeof bytes, deadline);
  return protocol::getU32(bytes);
}

std::int64_t ClientSocket::readI64(Clock::time_point deadline) {
  unsigned char bytes[8];
  readExact(bytes, sizeof bytes, deadline);
  return static_cast<std::int64_t>(protocol::getU64(bytes));
}

std::string ClientSocket::readBlob(std::size_t maxBytes, Clock::time_point deadline) {
  const auto length = static_cast<std::uint64_t>(readI64(deadline));
  if (length > maxBytes) {
    throw SocketValueTooLarge(
        fmt::format("reply value of {} bytes exceeds the {}-byte limit", length, maxBytes), length,
        maxBytes);
  }
  std::string value(static_cast<std::size_t>(length), '\0');
  readExact(value.data(), value.size(), deadline);
  return value;
}

}  // namespace ddprun::rendezvous::detail
