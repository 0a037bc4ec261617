#include "stores/hosted_stores.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <stdexcept>

#include "ddprun/common/local_address.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/server_limits.h"

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

HostedStores::HostedStores(StoreAccess access, std::size_t maxConnections)
    : access_(std::move(access)), maxConnections_(maxConnections) {}

HostedStores::~HostedStores() = default;

std::vector<rendezvous::LabelledStats> HostedStores::stats() const {
  std::vector<rendezvous::LabelledStats> stores;
  if (rendezvous_) stores.push_back({{{"store", "rendezvous"}}, rendezvous_->stats()});
  if (workers_) stores.push_back({{{"store", "workers"}}, workers_->stats()});
  return stores;
}

std::uint16_t HostedStores::host(const std::string& address) {
  const rendezvous::ServerOptions options =
      serverOptions(listenEverywhere_ ? "0.0.0.0" : address, 0);
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

rendezvous::ServerOptions HostedStores::serverOptions(const std::string& host,
                                                      std::uint16_t port) const {
  rendezvous::ServerOptions options;
  options.host = host;
  options.port = port;
  options.secret = access_.security.secret;
  options.tls = access_.security.tls;
  options.maxConnections = maxConnections_;
  // The agent sets only what it derives (the connection budget); the check is the daemon's, so
  // a limit that is wrong here is a bug, said as the daemon would say it.
  if (auto problem = rendezvous::serverLimitsProblem(options)) {
    throw std::logic_error("the agent's store limits are out of range: " + *problem);
  }
  return options;
}

void HostedStores::warnIfOpen(const std::string& host, std::string_view address,
                              std::string_view which) {
  if (warnedOpen_) return;
  if (auto warning = rendezvous::openStoreWarning(which, host, address, access_.security,
                                                  rendezvous::kAgentSecurityOptions)) {
    warnedOpen_ = true;
    spdlog::warn("{}", *warning);
  }
}

std::string HostedStores::relayHandoffVariable() const {
  return relay_ ? relay_->handoffVariable() : std::string();
}

rendezvous::TcpStoreOptions HostedStores::hostOrFind(const RendezvousConfig& config,
                                                     const std::string& handoffSocket) {
  const rendezvous::JobSecurity& security = access_.security;
  rendezvous::TcpStoreOptions store = access_.endpoint;
  // The workers' relay first: its failure (no descriptors) ends the agent before it joins anyone.
  if (security.secret) {
    rendezvous::RelayOptions relay{*security.secret};
    relay.tls = security.tls;
    relay.handoffPath = handoffSocket;
    relay_ = std::make_unique<rendezvous::LoopbackRelay>(std::move(relay));
  }
  const HostingDecision decision = decideHosting(config, namesThisHostThroughLoopback);
  listenEverywhere_ = decision.listenEverywhere;
  if (!decision.mayHost()) return store;
  rendezvous::ServerOptions options =
      serverOptions(listenEverywhere_ ? "0.0.0.0" : config.host, config.port);
  try {
    rendezvous_ = std::make_unique<rendezvous::RendezvousServer>(options);
    rendezvous_->start();
  } catch (const rendezvous::ServerError& error) {
    switch (onListenFailure(config, decision, error.code())) {
      case ListenFailureStep::kListenEverywhere:
        spdlog::warn(
            "the rendezvous host name {} does not resolve here yet: listening on all "
            "interfaces for the other nodes, which reach it once the name resolves",
            config.host);
        listenEverywhere_ = true;
        options = serverOptions("0.0.0.0", config.port);
        rendezvous_ = std::make_unique<rendezvous::RendezvousServer>(options);
        rendezvous_->start();
        break;
      case ListenFailureStep::kBeClient:
        rendezvous_.reset();
        listenEverywhere_ = false;
        return store;
      case ListenFailureStep::kFailNamingPortSource:
        // The user did not type the port: the line names where it came from and the one setting
        // that changes it.
        throw rendezvous::ServerError(
            fmt::format("cannot host the rendezvous store on {}:{}: the port is taken ({} {})",
                        common::printable(config.host), config.port, config.port,
                        config.endpointSource),
            error.code());
      case ListenFailureStep::kFail:
        throw;
    }
  }
  store.port = rendezvous_->port();
  if (listenEverywhere_) {
    spdlog::warn(
        "the rendezvous endpoint {} resolves to a loopback address on this host, which "
        "other nodes cannot reach: listening on all interfaces instead; give "
        "--rdzv-endpoint this host's network address to listen on it alone",
        config.host);
  }
  spdlog::info("hosting the rendezvous store on {} (at most {} connections{})",
               rendezvous_->address(), maxConnections_, rendezvous::storeSecurityNote(security));
  warnIfOpen(options.host, rendezvous_->address(), "the rendezvous store");
  return store;
}

std::string HostedStores::advertisedAddress(const RendezvousConfig& config) const {
  if (auto address = launcher::advertisedAddress(config, listenEverywhere_)) return *address;
  // Empty while the store's host name does not resolve yet: Membership::open asks the store
  // backend once it reaches the store (StoreBackend::addressTowardStore).
  return common::localAddressToward(config.host, config.port).value_or("");
}

}  // namespace ddprun::launcher
