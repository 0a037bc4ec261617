// The listener, the connection registry and the deadline sweep of RendezvousServer.
#include "ddprun/rendezvous/server.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "auth/asio_tls.h"
#include "server/handshake_gate.h"
#include "server/session.h"
#include "server/tls_front.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// How late a sweep (due every 250 ms at most) may be before the server counts the time as its own
// stall rather than the holders' silence.
constexpr std::chrono::seconds kServerStall{1};

std::string formatEndpoint(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  return address.is_v6() ? fmt::format("[{}]:{}", address.to_string(), endpoint.port())
                         : fmt::format("{}:{}", address.to_string(), endpoint.port());
}

// One line that names the address, what went wrong and what to do about it.
std::string bindErrorMessage(const std::string& where, const boost::system::error_code& error) {
  if (error == boost::system::errc::address_in_use) {
    return fmt::format(
        "cannot listen on {}: the address is already in use (another process "
        "listens there; choose another port, or port 0 for a free one)",
        where);
  }
  if (error == boost::system::errc::address_not_available) {
    return fmt::format(
        "cannot listen on {}: no network interface of this host has that address "
        "(use one of this host's addresses, e.g. 127.0.0.1)",
        where);
  }
  if (error == boost::system::errc::permission_denied) {
    return fmt::format(
        "cannot listen on {}: permission denied (ports below 1024 need privileges; "
        "choose a port above 1023)",
        where);
  }
  return fmt::format("cannot listen on {}: {}", where, error.message());
}

// The socket options every connection gets. Linux copies them from the listening socket to each
// accepted one, so they are set once on the listener (thousands of ranks connecting at once then
// cost no extra syscalls each); tuneConnection() checks the first connection and sets them per
// connection only on a kernel that does not copy them.
void applyConnectionOptions(int fd, const ServerOptions& options) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (options.keepAliveIdle.count() > 0) {
    const int idle = static_cast<int>(options.keepAliveIdle.count());
    const int interval = static_cast<int>(std::max<long>(1, options.keepAliveInterval.count()));
    const int probes = std::max(1, options.keepAliveProbes);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    // Also bound how long unacknowledged replies may sit with a vanished peer.
    const unsigned userTimeout = static_cast<unsigned>((idle + interval * probes) * 1000);
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeout, sizeof userTimeout);
  }
}

bool optionsInherited(int fd, const ServerOptions& options) {
  int value = 0;
  socklen_t length = sizeof value;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &length) != 0 || value == 0) return false;
  if (options.keepAliveIdle.count() == 0) return true;
  length = sizeof value;
  return ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &value, &length) == 0 &&
         value == static_cast<int>(options.keepAliveIdle.count());
}

}  // namespace

class RendezvousServer::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        // Every Asio object of this server is used by the serving thread only (stop() reaches it
        // through an eventfd, not through Asio), so Asio may skip all of its internal locking.
        io_(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE),
        acceptor_(io_),
        peerSocket_(io_),
        retryTimer_(io_),
        sweepTimer_(io_),
        stopEvent_(io_),
        context_(options_) {
    if (options_.tls) {
      // The invariant loadJobSecurity() gives every program that takes the files from a person
      // (securityOptionsProblem() names the option to fix there): here it is the options a caller
      // built, and a TLS store without a token would admit anyone. A thrown error rather than an
      // assert, which a release build would drop.
      if (!options_.secret || !options_.tls->canServe()) {
        throw ServerError(fmt::format(
            "ServerOptions: TLS {}; load the token and TLS files together with loadJobSecurity()",
            !options_.secret ? "without the job's token (secret)"
                             : "from a TlsConfig without the certificate's key"));
      }
      tls_.emplace(auth::asioContext(options_.tls->serverContext()));
    }
    listen();
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
      throw ServerError(fmt::format("cannot create an eventfd: {}", std::strerror(errno)));
    stopEvent_.assign(fd);
  }

  ~Impl() { stop(); }

  std::uint16_t port() const { return boundEndpoint_.port(); }
  std::string address() const { return formatEndpoint(boundEndpoint_); }

  void run() {
    if (stopRequested_) return;
    acceptNext();
    scheduleSweep();
    stopEvent_.async_wait(asio::posix::stream_descriptor::wait_read,
                          [this](const boost::system::error_code&) { shutdown(); });
    io_.run();
  }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  void stop() {
    if (!stopRequested_.exchange(true)) {
      ::eventfd_write(stopEvent_.native_handle(), 1);  // wakes run()'s loop from any thread
    }
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  Stats stats() const {
    Stats stats{context_.connections.load(),
                context_.accepted.load(),
                context_.refused.load(),
                context_.protocolErrors.load(),
                context_.refusedHandshakes.load(),
                context_.kv.storedBytes(),
                context_.replyMemory(),
                context_.kv.keyCount(),
                {}};
    stats.operations.reserve(protocol::kOpCount);
    for (std::size_t op = 0; op < protocol::kOpCount; ++op) {
      stats.operations.emplace_back(protocol::opName(static_cast<protocol::Op>(op)),
                                    context_.operations[op].load(std::memory_order_relaxed));
    }
    return stats;
  }

 private:
  void listen() {
    const std::string where = options_.host.find(':') != std::string::npos
                                  ? fmt::format("[{}]:{}", options_.host, options_.port)
                                  : fmt::format("{}:{}", options_.host, options_.port);
    boost::system::error_code error;
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, error);
    if (error || results.empty()) {
      throw ServerError(fmt::format("cannot listen on {}: cannot resolve host '{}' ({})", where,
                                    options_.host, error ? error.message() : "no address"),
                        ServerError::Code::kUnresolvedHost);
    }
    const tcp::endpoint endpoint = results.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
    if (!error && endpoint.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    // The kernel caps the backlog at net.core.somaxconn; ask for plenty so that thousands of
    // ranks connecting at once are queued instead of refused.
    if (!error) acceptor_.listen(65535, error);
    if (error) {
      const ServerError::Code code = error == boost::system::errc::address_in_use
                                         ? ServerError::Code::kAddressInUse
                                     : error == boost::system::errc::address_not_available
                                         ? ServerError::Code::kAddressNotAvailable
                                         : ServerError::Code::kOther;
      throw ServerError(bindErrorMessage(where, error), code);
    }
    applyConnectionOptions(acceptor_.native_handle(), options_);
    boundEndpoint_ = acceptor_.local_endpoint();
  }

  void acceptNext() {
    acceptor_.async_accept(peerSocket_, peerEndpoint_,
                           [this](const boost::system::error_code& error) { onAccept(error); });
  }

  void onAccept(const boost::system::error_code& error) {
    if (error == asio::error::operation_aborted || stopRequested_) return;
    if (error) {
      // Typically EMFILE: out of file descriptors. Back off instead of spinning on the error (the
      // connection waits in the backlog until a descriptor is free), and say so once per streak
      // of failures, not ten times a second.
      if (acceptFailures_++ == 0) {
        spdlog::error("accept failed on {}: {}; retrying every 100 ms", address(), error.message());
      }
      retryTimer_.expires_after(std::chrono::milliseconds(100));
      retryTimer_.async_wait([this](const boost::system::error_code& e) {
        if (!e) acceptNext();
      });
      return;
    }
    if (acceptFailures_ > 0) {
      spdlog::warn("accepting on {} again after {} failed attempts", address(), acceptFailures_);
      acceptFailures_ = 0;
    }
    const std::string peer = formatEndpoint(peerEndpoint_);
    if (context_.sessions.size() + context_.gates.size() + context_.tlsHandshakes >=
        options_.maxConnections) {
      context_.refused.fetch_add(1, std::memory_order_relaxed);
      if (context_.refused.load() == 1 || context_.refused.load() % 1000 == 0) {
        spdlog::warn(
            "refusing connection from {}: {} connections open, the limit (refusals so "
            "far: {})",
            peer, context_.sessions.size() + context_.gates.size() + context_.tlsHandshakes,
            context_.refused.load());
      }
      boost::system::error_code ignored;
      peerSocket_.close(ignored);
    } else {
      if (!inheritanceChecked_) {
        inheritanceChecked_ = true;
        optionsInherited_ = optionsInherited(peerSocket_.native_handle(), options_);
      }
      if (!optionsInherited_) applyConnectionOptions(peerSocket_.native_handle(), options_);
      context_.accepted.fetch_add(1, std::memory_order_relaxed);
      context_.connections.fetch_add(1, std::memory_order_relaxed);
      if (tls_) {
        if (context_.gates.size() + context_.tlsHandshakes >= options_.maxPendingHandshakes) {
          evictOldestHandshake();
        }
        auto front = std::make_shared<TlsFront>(std::move(peerSocket_), *tls_, peer,
                                                peerEndpoint_.address().to_string(), context_);
        context_.tlsFronts.emplace(front.get(), front);
        front->start();
      } else if (options_.secret) {
        if (context_.gates.size() >= options_.maxPendingHandshakes) evictOldestHandshake();
        auto gate = std::make_shared<HandshakeGate>(std::move(peerSocket_), peer,
                                                    peerEndpoint_.address().to_string(), context_);
        context_.gates.emplace(gate.get(), gate);
        gate->start();
      } else {
        Session::admit(std::move(peerSocket_), peer, context_);
      }
    }
    peerSocket_ = tcp::socket(io_);
    acceptNext();
  }

  // Refuses the connection that has waited longest in the token or the TLS handshake.
  void evictOldestHandshake() {
    std::shared_ptr<HandshakeGate> gate;
    std::shared_ptr<TlsFront> front;
    for (const auto& [key, candidate] : context_.gates) {
      if (!gate || candidate->acceptedAt() < gate->acceptedAt()) gate = candidate;
    }
    for (const auto& [key, candidate] : context_.tlsFronts) {
      if (candidate->inHandshake() && (!front || candidate->acceptedAt() < front->acceptedAt())) {
        front = candidate;
      }
    }
    const std::string detail = fmt::format("({} of them)", options_.maxPendingHandshakes);
    if (front && (!gate || front->acceptedAt() < gate->acceptedAt())) {
      front->refuse(Refusal::kEvicted, detail);
    } else if (gate) {
      gate->refuse(Refusal::kEvicted, detail);
    }
  }

  // Closes stalled connections and expires holds whose holders stopped renewing. Runs a few
  // times per timeout period, not per connection, so idle connections cost nothing between
  // sweeps; while holds exist it runs every 50 ms, which bounds how late a lapsed hold is seen.
  void scheduleSweep() {
    auto period = std::clamp<std::chrono::milliseconds>(
        std::min({options_.partialRequestTimeout, options_.writeStallTimeout,
                  options_.handshakeTimeout}) /
            4,
        std::chrono::milliseconds(20), std::chrono::milliseconds(250));
    if (context_.kv.hasHolds()) period = std::min(period, std::chrono::milliseconds(50));
    sweepTimer_.expires_after(period);
    const auto due = Session::Clock::now() + period;
    sweepTimer_.async_wait([this, due](const boost::system::error_code& error) {
      if (error || stopRequested_) return;
      const auto now = Session::Clock::now();
      // A sweep far later than due means this server did not run meanwhile (its process was
      // stopped, e.g. the agent hosting it by Ctrl-Z, or its host was suspended): nobody could
      // renew a hold in that time, so it is added to every hold's time-to-live instead of
      // expiring them all at once (which would report every node lost, this agent's own too).
      if (now - due > kServerStall) {
        spdlog::info("the store did not run for {:.1f} s: hold deadlines moved on by that time",
                     std::chrono::duration<double>(now - due).count());
        context_.kv.postponeHolds(now - due);
      }
      for (const auto& session : snapshot()) session->checkDeadlines(now);
      for (const auto& gate : gateSnapshot()) gate->checkDeadline(now);
      for (const auto& front : frontSnapshot()) front->checkDeadline(now);
      context_.kv.expireHolds(now);
      context_.refusals.flush(now);  // the refusal counts whose window has ended
      scheduleSweep();
    });
  }

  std::vector<std::shared_ptr<Session>> snapshot() const {
    std::vector<std::shared_ptr<Session>> sessions;
    sessions.reserve(context_.sessions.size());
    for (const auto& entry : context_.sessions) sessions.push_back(entry.second);
    return sessions;
  }

  // The same for the connections still in the token handshake (a gate may close while iterating).
  std::vector<std::shared_ptr<HandshakeGate>> gateSnapshot() const {
    std::vector<std::shared_ptr<HandshakeGate>> gates;
    gates.reserve(context_.gates.size());
    for (const auto& entry : context_.gates) gates.push_back(entry.second);
    return gates;
  }

  std::vector<std::shared_ptr<TlsFront>> frontSnapshot() const {
    std::vector<std::shared_ptr<TlsFront>> fronts;
    fronts.reserve(context_.tlsFronts.size());
    for (const auto& entry : context_.tlsFronts) fronts.push_back(entry.second);
    return fronts;
  }

  void shutdown() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    retryTimer_.cancel();
    sweepTimer_.cancel();
    stopEvent_.close(ignored);
    for (const auto& session : snapshot()) session->close("server shutting down", false);
    for (const auto& gate : gateSnapshot()) gate->close();
    for (const auto& front : frontSnapshot()) front->close();
    context_.refusals.flushAll(Session::Clock::now());
  }

  ServerOptions options_;
  // With ServerOptions::tls. Before io_: the connections its handlers hold die with io_, after it.
  std::optional<asio::ssl::context> tls_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  tcp::socket peerSocket_;
  tcp::endpoint peerEndpoint_;
  tcp::endpoint boundEndpoint_;
  asio::steady_timer retryTimer_;
  asio::steady_timer sweepTimer_;
  asio::posix::stream_descriptor stopEvent_;  // an eventfd written by stop()
  ServerContext context_;
  std::atomic<bool> stopRequested_{false};
  std::uint64_t acceptFailures_ = 0;  // in a row
  bool inheritanceChecked_ = false;
  bool optionsInherited_ = false;
  std::thread thread_;
};

RendezvousServer::RendezvousServer(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
RendezvousServer::~RendezvousServer() = default;
std::uint16_t RendezvousServer::port() const { return impl_->port(); }
std::string RendezvousServer::address() const { return impl_->address(); }
void RendezvousServer::run() { impl_->run(); }
void RendezvousServer::start() { impl_->start(); }
void RendezvousServer::stop() { impl_->stop(); }
RendezvousServer::Stats RendezvousServer::stats() const { return impl_->stats(); }

}  // namespace ddprun::rendezvous
