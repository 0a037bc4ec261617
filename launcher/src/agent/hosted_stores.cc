#include "agent/hosted_stores.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/common/local_address.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/server_limits.h"
#include "membership/store_backends.h"

namespace ddprun::launcher {
namespace {

// True for a host name (not "localhost", not an IP literal) that resolves here to loopback
// addresses only: Debian's "127.0.1.1 <hostname>" line in /etc/hosts does that to a machine's own
// name, while the other nodes resolve the name to the machine's real address.
bool namesThisHostThroughLoopback(const std::string& host) {
  if (host == "localhost") return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) == 0) {  // an IP literal
    ::freeaddrinfo(found);
    return false;
  }
  hints.ai_flags = 0;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool loopbackOnly = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) {
      loopbackOnly = loopbackOnly && common::isLoopbackAddress(*a->ai_addr);
    }
  }
  ::freeaddrinfo(found);
  return loopbackOnly;
}

}  // namespace

// How many connections each store this agent hosts may hold, given its descriptor limit. Without
// a cap, idle connections to its store could take every descriptor, and the agent could then not
// make the pipes to restart a worker. So it keeps a reserve: 64 for itself (stdio, the event
// loop's epoll and eventfds, its own store clients, the FileTimer pipe, the listeners, /proc and
// cgroup reads) and 16 per local worker (about 10 at once at worst: its stdout and stderr pipes or
// pty, both ends while it is spawned, the spawn's error pipe, its log files under --redirects or
// --tee, its heartbeat file, a debugger's pipe when it hangs). The rest is split between the two
// stores it may host (the job's rendezvous store and the workers' store).
std::size_t hostedStoreConnections(int nprocPerNode, std::size_t descriptorLimit) {
  const std::size_t reserve = 64 + 16 * static_cast<std::size_t>(std::max(1, nprocPerNode));
  const std::size_t perStore = descriptorLimit > reserve ? (descriptorLimit - reserve) / 2 : 0;
  // A store needs a few connections for the agents' own clients; below that nothing would work.
  constexpr std::size_t kFewest = 16;
  return std::clamp(perStore, kFewest, rendezvous::ServerOptions{}.maxConnections);
}

HostedStores::HostedStores(rendezvous::JobSecurity security, std::size_t maxConnections)
    : security_(std::move(security)), maxConnections_(maxConnections) {}

HostedStores::~HostedStores() = default;

std::uint16_t HostedStores::host(const std::string& address) {
  const rendezvous::ServerOptions options = serverOptions(listenEverywhere_ ? "0.0.0.0" : address, 0);
  workers_.reset();
  workers_ = std::make_unique<rendezvous::RendezvousServer>(options);
  workers_->start();
  warnIfOpen(options.host, workers_->address(), "the workers' store");
  return workers_->port();
}

std::pair<std::string, std::uint16_t> HostedStores::reachFromWorkers(const std::string& host,
                                                                     std::uint16_t port) {
  if (!relay_) return {host, port};
  relay_->setUpstream(host, port);
  return {"127.0.0.1", relay_->port()};
}

rendezvous::ServerOptions HostedStores::serverOptions(const std::string& host, std::uint16_t port) const {
  rendezvous::ServerOptions options;
  options.host = host;
  options.port = port;
  options.secret = security_.secret;
  options.tls = security_.tls;
  options.maxConnections = maxConnections_;
  // The agent sets only what it derives (the connection budget); the check is the daemon's, so
  // a limit that is wrong here is a bug, said as the daemon would say it.
  if (auto problem = rendezvous::serverLimitsProblem(options)) {
    throw std::logic_error("the agent's store limits are out of range: " + *problem);
  }
  return options;
}

void HostedStores::warnIfOpen(const std::string& host, std::string_view address, std::string_view which) {
  if (warnedOpen_) return;
  if (auto warning = rendezvous::openStoreWarning(which, host, address, security_,
                                                  rendezvous::kAgentSecurityOptions)) {
    warnedOpen_ = true;
    spdlog::warn("{}", *warning);
  }
}

std::string HostedStores::relayHandoffVariable() const {
  return relay_ ? relay_->handoffVariable() : std::string();
}

rendezvous::TcpStoreOptions HostedStores::hostOrFind(const LaunchConfig& config,
                                                     const std::string& handoffSocket) {
  const RendezvousConfig& rdzv = config.rdzv;
  rendezvous::TcpStoreOptions store = rendezvousStoreOptions(rdzv, security_);
  // The workers' relay first: its failure (no descriptors) ends the agent before it joins anyone.
  if (security_.secret) {
    rendezvous::RelayOptions relay{*security_.secret};
    relay.tls = security_.tls;
    relay.handoffPath = handoffSocket;
    relay_ = std::make_unique<rendezvous::LoopbackRelay>(std::move(relay));
  }
  const bool staticHost = rdzv.backend == RdzvBackend::kStatic && rdzv.nodeRank == 0;
  const bool mustHost = staticHost || rdzv.standalone || rdzv.settings.isHost.value_or(false);
  const bool mayHost = mustHost || (rdzv.backend == RdzvBackend::kC10d && !rdzv.settings.isHost);
  // A multi-node job's endpoint named through loopback here: listen on every interface (as
  // torchrun always does) and advertise the name, which the other nodes resolve for themselves.
  // Kubeflow's training-operator writes MASTER_ADDR=PET_MASTER_ADDR=localhost into a PyTorchJob's
  // master pod (the worker pods get the master's service name): torchrun's store listens on every
  // interface whatever it is given, so the workers reach it; so does this one.
  const bool kubeflowMaster = staticHost && rdzv.host == "localhost";
  listenEverywhere_ = mayHost && rdzv.maxNodes > 1 && rdzv.localAddr.empty() &&
                      (kubeflowMaster || namesThisHostThroughLoopback(rdzv.host));
  if (!mayHost) return store;
  rendezvous::ServerOptions options = serverOptions(listenEverywhere_ ? "0.0.0.0" : rdzv.host, rdzv.port);
  try {
    rendezvous_ = std::make_unique<rendezvous::RendezvousServer>(options);
    rendezvous_->start();
  } catch (const rendezvous::ServerError& error) {
    // A store host name that does not resolve yet (a Kubernetes service name appears seconds
    // after its pod): a node that must host listens on every interface, as torchrun's store
    // always does, and advertises the name; one that only may host is not that host, yet.
    const bool unresolved = error.code() == rendezvous::ServerError::Code::kUnresolvedHost;
    if (unresolved && mustHost && rdzv.maxNodes > 1 && rdzv.localAddr.empty()) {
      spdlog::warn("the rendezvous host name {} does not resolve here yet: listening on all "
                   "interfaces for the other nodes, which reach it once the name resolves",
                   rdzv.host);
      listenEverywhere_ = true;
      options = serverOptions("0.0.0.0", rdzv.port);
      rendezvous_ = std::make_unique<rendezvous::RendezvousServer>(options);
      rendezvous_->start();
    } else {
      // A port ddprun chose (Slurm's): the user did not type it, so the line names where it came
      // from and the one setting that changes it.
      if (mustHost && error.code() == rendezvous::ServerError::Code::kAddressInUse &&
          !rdzv.endpointSource.empty()) {
        throw rendezvous::ServerError(
            fmt::format("cannot host the rendezvous store on {}:{}: the port is taken ({} {})",
                        common::printable(rdzv.host), rdzv.port, rdzv.port, rdzv.endpointSource),
            error.code());
      }
      // c10d: the endpoint is served already (another agent of this job, or ddprun-rendezvous),
      // or it is another host's address: be a client.
      const bool someoneElses = error.code() == rendezvous::ServerError::Code::kAddressInUse ||
                                error.code() == rendezvous::ServerError::Code::kAddressNotAvailable ||
                                unresolved;
      if (mustHost || !someoneElses) throw;
      rendezvous_.reset();
      listenEverywhere_ = false;
      return store;
    }
  }
  store.port = rendezvous_->port();
  if (listenEverywhere_) {
    spdlog::warn("the rendezvous endpoint {} resolves to a loopback address on this host, which "
                 "other nodes cannot reach: listening on all interfaces instead; give "
                 "--rdzv-endpoint this host's network address to listen on it alone",
                 rdzv.host);
  }
  spdlog::info("hosting the rendezvous store on {} (at most {} connections{})",
               rendezvous_->address(), maxConnections_, rendezvous::storeSecurityNote(security_));
  warnIfOpen(options.host, rendezvous_->address(), "the rendezvous store");
  return store;
}

std::string HostedStores::advertisedAddress(const LaunchConfig& config) const {
  const RendezvousConfig& rdzv = config.rdzv;
  if (!rdzv.localAddr.empty()) return rdzv.localAddr;
  if (rdzv.standalone) return "127.0.0.1";
  if (listenEverywhere_) return rdzv.host;
  // Empty while the store's host name does not resolve yet: Membership::open asks the store
  // backend once it reaches the store (StoreBackend::addressTowardStore).
  return common::localAddressToward(rdzv.host, rdzv.port).value_or("");
}

}  // namespace ddprun::launcher
