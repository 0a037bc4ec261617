#include "relay/relay_link.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <type_traits>

#include "auth/tls_peer.h"
#include "ddprun/rendezvous/relay_handoff_wire.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

RelayLink::RelayLink(tcp::socket worker, std::vector<tcp::endpoint> store, std::string upstream,
                     const JobSecret& secret, asio::ssl::context* tls,
                     std::chrono::milliseconds connectTimeout, OnEnd onEnd)
    : worker_(std::move(worker)),
      store_(worker_.get_executor()),
      tlsContext_(tls),
      deadline_(worker_.get_executor()),
      endpoints_(std::move(store)),
      upstream_(std::move(upstream)),
      connectTimeout_(connectTimeout),
      handshake_(secret),
      hello_(handshake_.hello()),
      onEnd_(std::move(onEnd)) {}

RelayLink::RelayLink(asio::local::stream_protocol::socket requester,
                     std::vector<tcp::endpoint> store, std::string upstream,
                     const JobSecret& secret, std::chrono::milliseconds connectTimeout, OnEnd onEnd)
    : RelayLink(tcp::socket(requester.get_executor()), std::move(store), std::move(upstream),
                secret, nullptr, connectTimeout, std::move(onEnd)) {
  requester_.emplace(std::move(requester));
}

void RelayLink::start() {
  deadline_.expires_after(connectTimeout_);
  deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (!error) {
      self->finish(End::kUnreachable, fmt::format("no token-checked connection within {} ms",
                                                  self->connectTimeout_.count()));
    }
  });
  if (endpoints_.empty()) {
    finish(End::kUnreachable, fmt::format("{} does not resolve", upstream_));
    return;
  }
  asio::async_connect(store_, endpoints_,
                      [self = shared_from_this()](const boost::system::error_code& e,
                                                  const tcp::endpoint&) { self->onConnected(e); });
}

void RelayLink::onConnected(const boost::system::error_code& error) {
  if (finished_) return;
  if (error) {
    finish(End::kUnreachable, error.message());
    return;
  }
  // Store requests are small and latency-bound, as on the workers' own connections.
  boost::system::error_code ignored;
  store_.set_option(tcp::no_delay(true), ignored);
  if (tlsContext_ == nullptr) {
    sendHello();
    return;
  }
  tls_.emplace(store_, *tlsContext_);
  tls_->async_handshake(
      asio::ssl::stream_base::client,
      [self = shared_from_this()](const boost::system::error_code& e) { self->onTlsHandshake(e); });
}

void RelayLink::onTlsHandshake(const boost::system::error_code& error) {
  if (finished_) return;
  if (error) {
    if (const auto refused = auth::refusedCertificate(tls_->native_handle())) {
      finish(End::kUntrusted, *refused);
    } else {
      finish(End::kNoTls, error.message());
    }
    return;
  }
  sendHello();
}

template <typename Operation>
void RelayLink::withUpstream(Operation&& operation) {
  if (tls_) {
    operation(*tls_);
  } else {
    operation(store_);
  }
}

void RelayLink::sendHello() {
  challenge_.assign(auth::kServerChallengeBytes, '\0');
  withUpstream([this](auto& upstream) {
    asio::async_write(upstream, asio::buffer(hello_),
                      [self = shared_from_this()](const boost::system::error_code& e, std::size_t) {
                        if (e) self->finish(End::kUnreachable, e.message());
                      });
    asio::async_read(upstream, asio::buffer(challenge_),
                     [self = shared_from_this()](const boost::system::error_code& e, std::size_t) {
                       self->onChallenge(e);
                     });
  });
}

void RelayLink::onChallenge(const boost::system::error_code& error) {
  if (finished_) return;
  if (error) {
    // A store without a token closes the connection at the hello.
    finish(End::kNoToken, error.message());
    return;
  }
  switch (handshake_.answer(challenge_, proof_)) {
    case auth::ClientHandshake::Verdict::kAccepted:
      break;
    case auth::ClientHandshake::Verdict::kNotAChallenge:
      finish(End::kNoToken, "the reply to the token hello is not a token challenge");
      return;
    case auth::ClientHandshake::Verdict::kWrongSecret:
      finish(End::kWrongToken, "the store holds a different token");
      return;
  }
  withUpstream([this](auto& upstream) {
    asio::async_write(upstream, asio::buffer(proof_),
                      [self = shared_from_this()](const boost::system::error_code& e, std::size_t) {
                        self->onProofSent(e);
                      });
  });
}

void RelayLink::onProofSent(const boost::system::error_code& error) {
  if (finished_) return;
  if (error) {
    finish(End::kUnreachable, error.message());
    return;
  }
  deadline_.cancel();
  if (requester_) {
    handOff();
    return;
  }
  // Non-blocking, for pump()'s direct writes: a full socket buffer must not block the loop.
  boost::system::error_code ignored;
  worker_.non_blocking(true, ignored);
  store_.non_blocking(true, ignored);
  withUpstream([this](auto& upstream) {
    pump(worker_, upstream, toStore_);
    pump(upstream, worker_, toWorker_);
  });
}

template <typename From, typename To>
void RelayLink::pump(From& from, To& to, Buffer& buffer) {
  from.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &from, &to, &buffer](
                                                 const boost::system::error_code& error,
                                                 std::size_t bytes) {
    if (self->finished_) return;
    if (error) {
      self->finish(End::kClosed, "");
      return;
    }
    // A store request or reply is small and the peer's socket buffer nearly always has room:
    // write it now, in place, and go back to reading. Only what the kernel does not take
    // waits for an asynchronous write (a trip through the loop per message would cost more
    // than the copy itself). A TLS stream is always written asynchronously: its synchronous
    // write would block the loop on a full socket.
    std::size_t written = 0;
    if constexpr (std::is_same_v<To, tcp::socket>) {
      boost::system::error_code writeError;
      written = to.write_some(asio::buffer(buffer.data(), bytes), writeError);
      if (writeError && writeError != asio::error::would_block) {
        self->finish(End::kClosed, "");
        return;
      }
      if (written == bytes) {
        self->pump(from, to, buffer);
        return;
      }
    }
    asio::async_write(to, asio::buffer(buffer.data() + written, bytes - written),
                      [self, &from, &to, &buffer](const boost::system::error_code& e, std::size_t) {
                        if (self->finished_) return;
                        if (e) {
                          self->finish(End::kClosed, "");
                          return;
                        }
                        self->pump(from, to, buffer);
                      });
  });
}

void RelayLink::handOff() {
  char taken = DDPRUN_HANDOFF_TAKEN;
  iovec data{&taken, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  // Taken out of Asio first: its epoll set must forget the socket (release() removes it there),
  // which closing would not do while the worker holds the same open file.
  boost::system::error_code error;
  const int store = store_.release(error);
  if (error) {
    finish(End::kClosed, "");
    return;
  }
  std::memcpy(CMSG_DATA(header), &store, sizeof store);
  // One byte on a fresh socket always fits; a requester that has given up makes this fail, and
  // the store connection then goes with the link.
  const ssize_t sent =
      ::sendmsg(requester_->native_handle(), &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  ::close(store);  // the worker holds its own reference now
  finish(sent == 1 ? End::kHandedOff : End::kClosed, "");
}

void RelayLink::finish(End end, const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  boost::system::error_code ignored;
  deadline_.cancel();
  worker_.close(ignored);
  if (requester_) requester_->close(ignored);
  store_.close(ignored);  // under tls_ too: no close_notify, the store sees the connection end
  // Last: the relay drops its reference here; in-flight handlers keep this object alive.
  onEnd_(this, end, detail);
}

}  // namespace ddprun::rendezvous
