// HostedStores: the stores this agent serves, and the relay its workers reach them through.
//   - the job's rendezvous store: standalone, static node 0, or the first c10d agent on the
//     endpoint (the others find it taken and are its clients); with etcd, none: etcd holds the
//     rendezvous. Which, where it listens and what this node advertises are decided by
//     stores/hosting_policy.h; this class starts the servers it decides on;
//   - the round's workers' store, as group rank 0 of a c10d or etcd round (WorkerStoreHost: the
//     machine asks for it when a round says so);
//   - with the job's token, a LoopbackRelay that proves it for the unmodified workers.
//
// Thread safety: the agent's main thread (the event loop's) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rendezvous_client.h"
#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/security_options.h"
#include "ddprun/rendezvous/server_metrics.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "stores/hosting_policy.h"
#include "stores/store_backends.h"

namespace ddprun::rendezvous {
class LoopbackRelay;
class RendezvousServer;
struct ServerOptions;
}  // namespace ddprun::rendezvous

namespace ddprun::launcher {

class HostedStores final : public WorkerStoreHost {
 public:
  // `access`: the job's security and its endpoint (storeAccess). With the job's secret, every
  // store this agent hosts wants it, and the workers go through a relay. With TLS as well, every
  // store connection between hosts is a TLS one. `maxConnections`: each hosted store's
  // (hostedStoreConnections).
  HostedStores(StoreAccess access, std::size_t maxConnections);
  ~HostedStores() override;

  // Decides whether to host the rendezvous store (decideHosting) and starts it; returns where to
  // reach it: the endpoint, or the port this agent's store really got.
  // `handoffSocket`: where the relay (with a token) listens for handoffs, or empty for nowhere
  // (agent/relay_handoff.h). Throws what the relay or the server throws when this agent must host
  // it and cannot (the wiring reports it as a start-up error).
  rendezvous::TcpStoreOptions hostOrFind(const RendezvousConfig& config,
                                         const std::string& handoffSocket);
  // The relay's DDPRUN_RELAY_HANDOFF for the workers; empty without a relay or its handoffs.
  std::string relayHandoffVariable() const;
  // Where the other nodes reach this one (MASTER_ADDR if rank 0); empty while the store's host
  // name does not resolve yet (Membership::open then asks once the store answers).
  std::string advertisedAddress(const RendezvousConfig& config) const;
  bool hostsRendezvous() const { return rendezvous_ != nullptr; }
  // The workers reach their store through a relay (the job has a token).
  bool relaysWorkers() const { return access_.security.secret.has_value(); }
  // The figures of each store this agent hosts now (/metrics), labelled store="rendezvous" or
  // store="workers"; none when it hosts none.
  std::vector<rendezvous::LabelledStats> stats() const;

  // WorkerStoreHost:
  std::uint16_t host(const std::string& address) override;
  std::pair<std::string, std::uint16_t> reachFromWorkers(const std::string& host,
                                                         std::uint16_t port) override;

 private:
  // The options of a store this agent hosts on host:port, its limits checked as the daemon's are.
  rendezvous::ServerOptions serverOptions(const std::string& host, std::uint16_t port) const;
  // One line, the first time a store of this agent listens where other hosts reach it, open.
  void warnIfOpen(const std::string& host, std::string_view address, std::string_view which);

  StoreAccess access_;
  std::unique_ptr<rendezvous::LoopbackRelay> relay_;
  std::unique_ptr<rendezvous::RendezvousServer> rendezvous_;
  std::unique_ptr<rendezvous::RendezvousServer> workers_;
  std::size_t maxConnections_;
  bool listenEverywhere_ = false;
  bool warnedOpen_ = false;
};

}  // namespace ddprun::launcher
