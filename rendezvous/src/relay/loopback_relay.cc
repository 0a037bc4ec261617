// The listener, the registry of links and the serving thread of LoopbackRelay.
#include "ddprun/rendezvous/loopback_relay.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "auth/asio_tls.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/relay_handoff_wire.h"
#include "refusal_tally.h"
#include "relay/peer_user.h"
#include "relay/relay_link.h"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using Local = asio::local::stream_protocol;

namespace {

// Refusals are counted per local user (unknown for a peer gone) and verdict: one line per window.
using RelayRefusals = RefusalTally<std::optional<uid_t>, PeerVerdict>;
constexpr std::chrono::seconds kRefusalWindow{60};
// Users and verdicts followed at most (a node has few users; the bound is for memory alone).
constexpr std::size_t kMaxRefusalsFollowed = 1024;

std::string_view describeRefusal(PeerVerdict verdict) {
  switch (verdict) {
    case PeerVerdict::kOtherUser:
      return "not the agent's user";
    case PeerVerdict::kGone:
      return "peer gone before it was served";
    case PeerVerdict::kLookupFailed:
      return "the kernel could not be asked who opened it";
    case PeerVerdict::kAdmit:
    case PeerVerdict::kAdmitUnchecked:
      break;
  }
  return "refused";
}

std::string describeSource(const std::optional<uid_t>& user) {
  return user ? fmt::format("uid {}", *user) : std::string("an unknown local user");
}

// Where the links of the current round go.
struct Upstream {
  std::string name;  // "host:port", for messages
  std::vector<tcp::endpoint> endpoints;
};

}  // namespace

class LoopbackRelay::Impl {
 public:
  explicit Impl(RelayOptions options)
      : options_(std::move(options)),
        // One thread serves; the hint cannot be UNSAFE: Asio's asynchronous resolver runs on a
        // thread of its own and needs the locking.
        io_(1),
        acceptor_(io_),
        worker_(io_),
        handoffAcceptor_(io_),
        requester_(io_),
        handoffRetryTimer_(io_),
        retryTimer_(io_),
        refusalTimer_(io_),
        stopEvent_(io_),
        agentUser_(::geteuid()),
        refusals_(kRefusalWindow, kMaxRefusalsFollowed) {
    if (options_.tls) {
      tls_.emplace(auth::asioContext(options_.tls->clientContext()));
    }
    boost::system::error_code error;
    const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), 0);
    acceptor_.open(endpoint.protocol(), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(65535, error);
    if (error)
      throw std::runtime_error(
          fmt::format("cannot listen on 127.0.0.1 for the workers' "
                      "store relay: {}",
                      error.message()));
    port_ = acceptor_.local_endpoint().port();
    peers_.emplace(acceptor_.local_endpoint());
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) throw std::runtime_error("cannot create an eventfd for the store relay");
    stopEvent_.assign(fd);
    if (!options_.handoffPath.empty() && !options_.tls) listenForHandoffs(options_.handoffPath);
    acceptNext();
    stopEvent_.async_wait(asio::posix::stream_descriptor::wait_read,
                          [this](const boost::system::error_code&) { shutdown(); });
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    ::eventfd_write(stopEvent_.native_handle(), 1);
    if (thread_.joinable()) thread_.join();
    if (!handoffPath_.empty()) ::unlink(handoffPath_.c_str());
  }

  std::uint16_t port() const { return port_; }
  const std::string& handoffPath() const { return handoffPath_; }

  // Resolved here, once per round, on the caller's thread: connections then go straight to the
  // addresses (Asio's asynchronous resolver would add a trip through a thread of its own to
  // every worker connection).
  void setUpstream(const std::string& host, std::uint16_t port) {
    boost::system::error_code error;
    asio::io_context resolving;
    tcp::resolver resolver(resolving);
    std::vector<tcp::endpoint> endpoints;
    for (const auto& entry :
         resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, error)) {
      endpoints.push_back(entry.endpoint());
    }
    // The host comes from the round's master record, which an open store lets anyone write.
    if (error) {
      spdlog::warn("workers' store relay: cannot resolve {}: {}", common::printablePrefix(host),
                   error.message());
    }
    std::lock_guard lock(mutex_);
    upstream_ = Upstream{fmt::format("{}:{}", host, port), std::move(endpoints)};
  }

  Stats stats() const {
    return Stats{connections_.load(),  accepted_.load(),    upstreamFailures_.load(),
                 refusedUsers_.load(), refusedGone_.load(), refusedLookups_.load(),
                 handedOff_.load()};
  }

 private:
  std::optional<Upstream> currentUpstream() const {
    std::lock_guard lock(mutex_);
    return upstream_;
  }

  // The handoff socket, made before the serving thread starts. Read and write for the owner
  // only, in a directory only the owner can enter; a failure leaves the port to serve everyone.
  void listenForHandoffs(const std::string& path) {
    boost::system::error_code error;
    handoffAcceptor_.open(Local(), error);
    if (!error) handoffAcceptor_.bind(Local::endpoint(path), error);
    if (!error && ::chmod(path.c_str(), S_IRUSR | S_IWUSR) != 0) {
      error.assign(errno, boost::system::system_category());
    }
    if (!error) handoffAcceptor_.listen(4096, error);
    if (error) {
      spdlog::warn(
          "workers' store relay: no handoff socket at {} ({}); the workers' store "
          "connections all go through the relay",
          common::printablePrefix(path), error.message());
      handoffAcceptor_.close(error);
      return;
    }
    handoffPath_ = path;
    acceptHandoff();
  }

  void acceptHandoff() {
    handoffAcceptor_.async_accept(
        requester_, [this](const boost::system::error_code& error) { onHandoff(error); });
  }

  // A worker's shim asks for a store connection. Its own user only, as on the port; before a
  // round has formed it is told to use the relay, which then refuses it as it refuses everyone.
  void onHandoff(const boost::system::error_code& error) {
    if (error == asio::error::operation_aborted || stopping_) return;
    if (error) {
      // Out of descriptors: back off instead of spinning; meanwhile the shims wait, then connect
      // to the port.
      spdlog::error("the workers' store relay cannot accept a handoff: {}; retrying in 100 ms",
                    error.message());
      requester_ = Local::socket(io_);
      handoffRetryTimer_.expires_after(std::chrono::milliseconds(100));
      handoffRetryTimer_.async_wait([this](const boost::system::error_code& e) {
        if (!e) acceptHandoff();
      });
      return;
    }
    ucred peer{};
    socklen_t length = sizeof peer;
    boost::system::error_code ignored;
    if (::getsockopt(requester_.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
      refuse(PeerAdmission{PeerVerdict::kLookupFailed, std::nullopt}, "the handoff socket",
             fmt::format("({})", std::strerror(errno)));
      requester_.close(ignored);
    } else if (peer.uid != agentUser_) {
      refuse(PeerAdmission{PeerVerdict::kOtherUser, peer.uid},
             fmt::format("pid {} on the handoff socket", peer.pid),
             fmt::format("(only uid {}'s processes are relayed)", agentUser_));
      requester_.close(ignored);
    } else if (const std::optional<Upstream> upstream = currentUpstream(); !upstream) {
      const char relay = DDPRUN_HANDOFF_RELAY;
      requester_.send(asio::buffer(&relay, 1), 0, ignored);
      requester_.close(ignored);
    } else {
      adopt(std::make_shared<RelayLink>(std::move(requester_), upstream->endpoints, upstream->name,
                                        options_.secret, options_.connectTimeout,
                                        linkEnd(*upstream, /*relayed=*/false)));
    }
    requester_ = Local::socket(io_);
    acceptHandoff();
  }

  // Keeps `link` until it ends (onLinkEnd), and starts it.
  void adopt(std::shared_ptr<RelayLink> link) {
    links_.emplace(link.get(), link);
    link->start();
  }

  // What a link of `upstream` calls when it ends; `relayed`: a worker connection, not a handoff.
  RelayLink::OnEnd linkEnd(const Upstream& upstream, bool relayed) {
    return [this, name = upstream.name, relayed](RelayLink* ended, RelayLink::End end,
                                                 const std::string& detail) {
      onLinkEnd(ended, end, name, detail, relayed);
    };
  }

  void acceptNext() {
    acceptor_.async_accept(worker_,
                           [this](const boost::system::error_code& error) { onAccept(error); });
  }

  void onAccept(const boost::system::error_code& error) {
    if (error == asio::error::operation_aborted || stopping_) return;
    if (error) {
      // Out of descriptors: back off instead of spinning; the worker's client retries.
      spdlog::error("the workers' store relay cannot accept: {}; retrying in 100 ms",
                    error.message());
      retryTimer_.expires_after(std::chrono::milliseconds(100));
      retryTimer_.async_wait([this](const boost::system::error_code& e) {
        if (!e) acceptNext();
      });
      return;
    }
    const std::optional<Upstream> upstream = currentUpstream();
    // Another user, or a peer already gone, is not served; before a round has formed, nobody is
    // (there is nothing a worker could want).
    if (!admitted() || !upstream) {
      boost::system::error_code ignored;
      worker_.close(ignored);
    } else {
      boost::system::error_code ignored;
      worker_.set_option(tcp::no_delay(true), ignored);
      accepted_.fetch_add(1, std::memory_order_relaxed);
      connections_.fetch_add(1, std::memory_order_relaxed);
      adopt(std::make_shared<RelayLink>(
          std::move(worker_), upstream->endpoints, upstream->name, options_.secret,
          tls_ ? &*tls_ : nullptr, options_.connectTimeout, linkEnd(*upstream, /*relayed=*/true)));
    }
    worker_ = tcp::socket(io_);
    acceptNext();
  }

  // Whether the accepted connection may be served: the kernel's answer on the socket that opened
  // it (relay/peer_user.h) must show a live socket of this agent's user. The relay proves the
  // token for whoever it serves, so on a node shared with other users it must not serve them,
  // nor bytes left in the queue by a peer that has closed (issue #18). When the kernel cannot
  // tell (no socket diagnostics), the connection is served, with one warning.
  bool admitted() {
    boost::system::error_code error;
    const tcp::endpoint local = worker_.local_endpoint(error);
    const tcp::endpoint peer = error ? tcp::endpoint() : worker_.remote_endpoint(error);
    if (error) {  // reset while it waited: gone
      refuse(PeerAdmission{PeerVerdict::kGone, std::nullopt}, "a reset connection",
             "(reset before it was accepted)");
      return false;
    }
    const PeerLookup lookup = peers_->connectingSocket(local, peer);
    const PeerAdmission admission = admitPeer(lookup, agentUser_);
    switch (admission.verdict) {
      case PeerVerdict::kAdmit:
        return true;
      case PeerVerdict::kAdmitUnchecked:
        if (!warnedUnchecked_) {
          warnedUnchecked_ = true;
          spdlog::warn(
              "workers' store relay: the kernel cannot tell which user opened a "
              "connection (no socket diagnostics: {}): other local users can reach the "
              "job's store through this relay",
              std::strerror(lookup.error));
        }
        return true;
      case PeerVerdict::kOtherUser:
        refuse(admission, fmt::format("port {}", peer.port()),
               fmt::format("(only uid {}'s processes are relayed)", agentUser_));
        return false;
      case PeerVerdict::kGone:
        refuse(admission, fmt::format("port {}", peer.port()),
               lookup.outcome == PeerLookup::Outcome::kFound
                   ? fmt::format("(its socket is in {} with inode {})",
                                 tcpStateName(lookup.socket.state), lookup.socket.inode)
                   : std::string("(its socket no longer exists)"));
        return false;
      case PeerVerdict::kLookupFailed:
        refuse(admission, fmt::format("port {}", peer.port()),
               fmt::format("({})", std::strerror(lookup.error)));
        return false;
    }
    return false;
  }

  // Counts a refusal; its line at once if it is the first of its user and verdict, otherwise in
  // the window's count (refusal_tally.h). Nothing here comes from the peer's bytes.
  // `from`: where it came from ("port 41234"), for the line.
  void refuse(const PeerAdmission& admission, const std::string& from, const std::string& detail) {
    switch (admission.verdict) {
      case PeerVerdict::kOtherUser:
        refusedUsers_.fetch_add(1, std::memory_order_relaxed);
        break;
      case PeerVerdict::kGone:
        refusedGone_.fetch_add(1, std::memory_order_relaxed);
        break;
      case PeerVerdict::kLookupFailed:
        refusedLookups_.fetch_add(1, std::memory_order_relaxed);
        break;
      case PeerVerdict::kAdmit:
      case PeerVerdict::kAdmitUnchecked:
        return;  // not refusals
    }
    const auto now = RelayRefusals::Clock::now();
    if (refusals_.count(admission.owner, admission.verdict, now)) {
      const std::string source = describeSource(admission.owner);
      spdlog::warn(
          "workers' store relay: refused a connection from {} ({}): {} {}; more of "
          "these from {} are counted and logged once per {} s",
          source, from, describeRefusal(admission.verdict), detail, source, kRefusalWindow.count());
    }
    armRefusalTimer();
  }

  // Wakes the serving thread when the next window of counted refusals ends.
  void armRefusalTimer() {
    const auto due = refusals_.nextDue();
    if (!due || refusalTimerArmed_) return;
    refusalTimerArmed_ = true;
    refusalTimer_.expires_at(*due);
    refusalTimer_.async_wait([this](const boost::system::error_code& error) {
      refusalTimerArmed_ = false;
      if (error || stopping_) return;
      logRefusals(refusals_.due(RelayRefusals::Clock::now()));
      armRefusalTimer();
    });
  }

  static void logRefusals(const std::vector<RelayRefusals::Summary>& summaries) {
    for (const auto& summary : summaries) {
      const std::string text =
          refusalSummaryText(describeSource(summary.source), describeRefusal(summary.reason),
                             summary.count, summary.over);
      spdlog::warn("workers' store relay: {}", text);
    }
  }

  // `relayed`: a worker connection (counted in `connections`), not a handoff.
  void onLinkEnd(RelayLink* link, RelayLink::End end, const std::string& upstream,
                 const std::string& detail, bool relayed) {
    if (relayed) connections_.fetch_sub(1, std::memory_order_relaxed);
    if (end == RelayLink::End::kHandedOff) handedOff_.fetch_add(1, std::memory_order_relaxed);
    if (end != RelayLink::End::kClosed && end != RelayLink::End::kHandedOff) {
      // Once per upstream and kind of failure: every worker connection would say the same.
      if (reported_.emplace(upstream, static_cast<int>(end)).second) {
        const char* what = "the store cannot be reached";
        switch (end) {
          case RelayLink::End::kWrongToken:
            what = "the store refused this token: it holds a different one";
            break;
          case RelayLink::End::kNoToken:
            what =
                "the store does not take a token (it runs without one, or is not a ddprun store)";
            break;
          case RelayLink::End::kUntrusted:
            what = "the store's TLS certificate is not one the job trusts (tls_cert, tls_ca)";
            break;
          case RelayLink::End::kNoTls:
            what = "the store did not complete a TLS handshake (it runs without TLS)";
            break;
          case RelayLink::End::kClosed:
          case RelayLink::End::kHandedOff:
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
    handoffAcceptor_.close(ignored);
    retryTimer_.cancel();
    handoffRetryTimer_.cancel();
    refusalTimer_.cancel();
    logRefusals(refusals_.remaining(RelayRefusals::Clock::now()));
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
  Local::acceptor handoffAcceptor_;
  Local::socket requester_;
  asio::steady_timer handoffRetryTimer_;
  std::string handoffPath_;  // set before the serving thread starts, then read only
  asio::steady_timer retryTimer_;
  asio::steady_timer refusalTimer_;
  asio::posix::stream_descriptor stopEvent_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  bool stopping_ = false;  // serving thread only
  const uid_t agentUser_;
  std::optional<PeerSocketTable> peers_;  // serving thread only, once listening
  RelayRefusals refusals_;                // serving thread only
  bool refusalTimerArmed_ = false;        // serving thread only

  mutable std::mutex mutex_;
  std::optional<Upstream> upstream_;  // none before the first round

  std::unordered_map<RelayLink*, std::shared_ptr<RelayLink>> links_;  // serving thread only
  std::set<std::pair<std::string, int>> reported_;                    // serving thread only
  bool warnedUnchecked_ = false;                                      // serving thread only
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> upstreamFailures_{0};
  std::atomic<std::uint64_t> refusedUsers_{0};
  std::atomic<std::uint64_t> refusedGone_{0};
  std::atomic<std::uint64_t> refusedLookups_{0};
  std::atomic<std::uint64_t> handedOff_{0};
};

LoopbackRelay::LoopbackRelay(RelayOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
LoopbackRelay::~LoopbackRelay() = default;
std::uint16_t LoopbackRelay::port() const { return impl_->port(); }
std::string LoopbackRelay::handoffVariable() const {
  const std::string& path = impl_->handoffPath();
  return path.empty() ? std::string() : fmt::format("{}:{}", impl_->port(), path);
}
void LoopbackRelay::setUpstream(const std::string& host, std::uint16_t port) {
  impl_->setUpstream(host, port);
}
LoopbackRelay::Stats LoopbackRelay::stats() const { return impl_->stats(); }

}  // namespace ddprun::rendezvous
