// The listener, the registry of links and the serving thread of LoopbackRelay.
#include "ddprun/rendezvous/loopback_relay.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "auth/asio_tls.h"
#include "relay/peer_user.h"
#include "relay/relay_link.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

class LoopbackRelay::Impl {
 public:
  explicit Impl(RelayOptions options)
      : options_(std::move(options)),
        // One thread serves; the hint cannot be UNSAFE: Asio's asynchronous resolver runs on a
        // thread of its own and needs the locking.
        io_(1),
        acceptor_(io_),
        worker_(io_),
        retryTimer_(io_),
        stopEvent_(io_) {
    if (options_.tls) {
      tls_.emplace(auth::asioContext(options_.tls->clientContext()));
    }
    boost::system::error_code error;
    const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(65535, error);
    if (error) throw std::runtime_error(fmt::format("cannot listen on 127.0.0.1 for the workers' "
                                                    "store relay: {}", error.message()));
    port_ = acceptor_.local_endpoint().port();
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) throw std::runtime_error("cannot create an eventfd for the store relay");
    stopEvent_.assign(fd);
    acceptNext();
    stopEvent_.async_wait(asio::posix::stream_descriptor::wait_read,
                          [this](const boost::system::error_code&) { shutdown(); });
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    ::eventfd_write(stopEvent_.native_handle(), 1);
    if (thread_.joinable()) thread_.join();
  }

  std::uint16_t port() const { return port_; }

  // Resolved here, once per round, on the caller's thread: connections then go straight to the
  // addresses (Asio's asynchronous resolver would add a trip through a thread of its own to
  // every worker connection).
  void setUpstream(const std::string& host, std::uint16_t port) {
    boost::system::error_code error;
    asio::io_context resolving;
    tcp::resolver resolver(resolving);
    std::vector<tcp::endpoint> endpoints;
    for (const auto& entry : resolver.resolve(host, std::to_string(port),
                                              tcp::resolver::numeric_service, error)) {
      endpoints.push_back(entry.endpoint());
    }
    if (error) spdlog::warn("workers' store relay: cannot resolve {}: {}", host, error.message());
    std::lock_guard lock(mutex_);
    upstream_ = fmt::format("{}:{}", host, port);
    upstreamEndpoints_ = std::move(endpoints);
    upstreamSet_ = true;
  }

  Stats stats() const {
    return Stats{connections_.load(), accepted_.load(), upstreamFailures_.load(),
                 refusedUsers_.load()};
  }

 private:
  void acceptNext() {
    acceptor_.async_accept(worker_, [this](const boost::system::error_code& error) { onAccept(error); });
  }

  void onAccept(const boost::system::error_code& error) {
    if (error == asio::error::operation_aborted || stopping_) return;
    if (error) {
      // Out of descriptors: back off instead of spinning; the worker's client retries.
      spdlog::error("the workers' store relay cannot accept: {}; retrying in 100 ms", error.message());
      retryTimer_.expires_after(std::chrono::milliseconds(100));
      retryTimer_.async_wait([this](const boost::system::error_code& e) {
        if (!e) acceptNext();
      });
      return;
    }
    std::string upstream;
    std::vector<tcp::endpoint> endpoints;
    bool set = false;
    {
      std::lock_guard lock(mutex_);
      upstream = upstream_;
      endpoints = upstreamEndpoints_;
      set = upstreamSet_;
    }
    // Before a round has formed there is nothing a worker could want; another user is not served.
    if (!set || !fromOwnUser()) {
      boost::system::error_code ignored;
      worker_.close(ignored);
    } else {
      boost::system::error_code ignored;
      worker_.set_option(tcp::no_delay(true), ignored);
      accepted_.fetch_add(1, std::memory_order_relaxed);
      connections_.fetch_add(1, std::memory_order_relaxed);
      auto link = std::make_shared<RelayLink>(
          std::move(worker_), std::move(endpoints), upstream, options_.secret,
          tls_ ? &*tls_ : nullptr, options_.connectTimeout,
          [this, upstream](RelayLink* ended, RelayLink::End end, const std::string& detail) {
            onLinkEnd(ended, end, upstream, detail);
          });
      links_.emplace(link.get(), link);
      link->start();
    }
    worker_ = tcp::socket(io_);
    acceptNext();
  }

  // Whether the accepted connection comes from a process of this agent's user (or root, who can
  // read the token file anyway): the relay proves the token for whoever connects, so on a node
  // shared with other users it must not serve them. When the kernel cannot say (no sock_diag),
  // the connection is served, with one warning.
  bool fromOwnUser() {
    boost::system::error_code error;
    const tcp::endpoint local = worker_.local_endpoint(error);
    const tcp::endpoint peer = error ? tcp::endpoint() : worker_.remote_endpoint(error);
    if (error) return false;  // already gone
    const std::optional<uid_t> user = localPeerUser(local, peer);
    if (!user) {
      if (!warnedUnknownUser_) {
        warnedUnknownUser_ = true;
        spdlog::warn("workers' store relay: the kernel cannot tell which user opened a "
                     "connection (no sock_diag): other local users can reach the job's store "
                     "through this relay");
      }
      return true;
    }
    if (*user == ::geteuid() || *user == 0) return true;
    refusedUsers_.fetch_add(1, std::memory_order_relaxed);
    if (loggedUsers_.insert(*user).second) {
      spdlog::warn("workers' store relay: refused a connection from local user {} (only user {}'s "
                   "processes are relayed); further refusals of that user are not logged",
                   *user, ::geteuid());
    }
    return false;
  }

  void onLinkEnd(RelayLink* link, RelayLink::End end, const std::string& upstream,
                 const std::string& detail) {
    connections_.fetch_sub(1, std::memory_order_relaxed);
    if (end != RelayLink::End::kClosed) {
      // Once per upstream and kind of failure: every worker connection would say the same.
      if (reported_.emplace(upstream, static_cast<int>(end)).second) {
        const char* what = "the store cannot be reached";
        switch (end) {
          case RelayLink::End::kWrongToken:
            what = "the store refused this token: it holds a different one";
            break;
          case RelayLink::End::kNoToken:
            what = "the store does not take a token (it runs without one, or is not a ddprun store)";
            break;
          case RelayLink::End::kUntrusted:
            what = "the store's TLS certificate is not one the job trusts (tls_cert, tls_ca)";
            break;
          case RelayLink::End::kNoTls:
            what = "the store did not complete a TLS handshake (it runs without TLS)";
            break;
          case RelayLink::End::kClosed:
          case RelayLink::End::kUnreachable:
            break;
        }
        spdlog::error("workers' store relay: {} at {} ({}); the workers' store connections fail",
                      what, upstream, detail);
      }
      // Counted after the line is written, so whoever sees the count also finds the line.
      upstreamFailures_.fetch_add(1, std::memory_order_relaxed);
    }
    links_.erase(link);
  }

  void shutdown() {
    stopping_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    retryTimer_.cancel();
    stopEvent_.close(ignored);
    std::vector<std::shared_ptr<RelayLink>> links;
    for (const auto& entry : links_) links.push_back(entry.second);
    for (const auto& link : links) link->close();
  }

  RelayOptions options_;
  // With RelayOptions::tls. Before io_: the links its handlers hold die with io_, after it.
  std::optional<asio::ssl::context> tls_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  tcp::socket worker_;
  asio::steady_timer retryTimer_;
  asio::posix::stream_descriptor stopEvent_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  bool stopping_ = false;  // serving thread only

  mutable std::mutex mutex_;
  std::string upstream_;                      // "host:port", for messages
  std::vector<tcp::endpoint> upstreamEndpoints_;
  bool upstreamSet_ = false;

  std::unordered_map<RelayLink*, std::shared_ptr<RelayLink>> links_;  // serving thread only
  std::set<std::pair<std::string, int>> reported_;                      // serving thread only
  std::set<uid_t> loggedUsers_;                                         // serving thread only
  bool warnedUnknownUser_ = false;                                      // serving thread only
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> upstreamFailures_{0};
  std::atomic<std::uint64_t> refusedUsers_{0};
};

LoopbackRelay::LoopbackRelay(RelayOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
LoopbackRelay::~LoopbackRelay() = default;
std::uint16_t LoopbackRelay::port() const { return impl_->port(); }
void LoopbackRelay::setUpstream(const std::string& host, std::uint16_t port) {
  impl_->setUpstream(host, port);
}
LoopbackRelay::Stats LoopbackRelay::stats() const { return impl_->stats(); }

}  // namespace ddprun::rendezvous
