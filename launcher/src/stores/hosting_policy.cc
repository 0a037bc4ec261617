#include "stores/hosting_policy.h"

#include <algorithm>
#include <stdexcept>

namespace ddprun::launcher {

StoreHosting storeHosting(RdzvBackend backend) {
  // A switch, not a table: a backend added to RdzvBackend without its case here is a compiler
  // warning (-Wswitch).
  switch (backend) {
    case RdzvBackend::kStatic:
      return StoreHosting::kNodeRankZero;
    case RdzvBackend::kC10d:
      return StoreHosting::kFirstOnEndpoint;
    case RdzvBackend::kEtcd:
      return StoreHosting::kExternal;
  }
  throw std::logic_error("storeHosting: a rendezvous backend with no hosting rule");
}

HostingDecision decideHosting(
    const RendezvousConfig& config,
    const std::function<bool(const std::string&)>& namesThisHostThroughLoopback) {
  const StoreHosting hosting = storeHosting(config.backend);
  const bool rankZeroHost = hosting == StoreHosting::kNodeRankZero && config.nodeRank == 0;
  HostingDecision decision;
  if (rankZeroHost || config.standalone || config.settings.isHost.value_or(false)) {
    decision.role = HostingRole::kMustHost;
  } else if (hosting == StoreHosting::kFirstOnEndpoint && !config.settings.isHost) {
    decision.role = HostingRole::kMayHost;
  }
  // A multi-node job's endpoint named through loopback here: listen on every interface (as
  // torchrun always does) and advertise the name, which the other nodes resolve for themselves.
  // Kubeflow's training-operator writes MASTER_ADDR=PET_MASTER_ADDR=localhost into a PyTorchJob's
  // master pod (the worker pods get the master's service name): torchrun's store listens on every
  // interface whatever it is given, so the workers reach it; so does this one.
  const bool kubeflowMaster = rankZeroHost && config.host == "localhost";
  decision.listenEverywhere = decision.mayHost() && config.maxNodes > 1 &&
                              config.localAddr.empty() &&
                              (kubeflowMaster || namesThisHostThroughLoopback(config.host));
  return decision;
}

ListenFailureStep onListenFailure(const RendezvousConfig& config, const HostingDecision& decision,
                                  rendezvous::ServerError::Code code) {
  using Code = rendezvous::ServerError::Code;
  const bool unresolved = code == Code::kUnresolvedHost;
  // A name that does not resolve yet: a node that must host listens everywhere meanwhile (where
  // others wait for it); one that only may host is not the store's host, yet, and a client below.
  if (unresolved && decision.mustHost() && config.maxNodes > 1 && config.localAddr.empty()) {
    return ListenFailureStep::kListenEverywhere;
  }
  if (decision.mustHost() && code == Code::kAddressInUse && !config.endpointSource.empty()) {
    return ListenFailureStep::kFailNamingPortSource;
  }
  const bool someoneElses =
      code == Code::kAddressInUse || code == Code::kAddressNotAvailable || unresolved;
  return decision.mustHost() || !someoneElses ? ListenFailureStep::kFail
                                              : ListenFailureStep::kBeClient;
}

std::optional<std::string> advertisedAddress(const RendezvousConfig& config,
                                             bool listenEverywhere) {
  if (!config.localAddr.empty()) return config.localAddr;
  if (config.standalone) return "127.0.0.1";
  if (listenEverywhere) return config.host;
  return std::nullopt;
}

// Without a cap, idle connections to its store could take every descriptor, and the agent could
// then not make the pipes to restart a worker. So it keeps a reserve: 64 for itself (stdio, the
// event loop's epoll and eventfds, its own store clients, the FileTimer pipe, the listeners, /proc
// and cgroup reads) and 16 per local worker (about 10 at once at worst: its stdout and stderr pipes
// or pty, both ends while it is spawned, the spawn's error pipe, its log files under --redirects or
// --tee, its heartbeat file, a debugger's pipe when it hangs). The rest is split between the two
// stores it may host (the job's rendezvous store and the workers' store).
std::size_t hostedStoreConnections(int nprocPerNode, std::size_t descriptorLimit) {
  const std::size_t reserve = 64 + 16 * static_cast<std::size_t>(std::max(1, nprocPerNode));
  const std::size_t perStore = descriptorLimit > reserve ? (descriptorLimit - reserve) / 2 : 0;
  // A store needs a few connections for the agents' own clients; below that nothing would work.
  constexpr std::size_t kFewest = 16;
  return std::clamp(perStore, kFewest, rendezvous::ServerOptions{}.maxConnections);
}

}  // namespace ddprun::launcher
