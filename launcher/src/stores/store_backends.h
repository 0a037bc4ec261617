// How a process of the job reaches its rendezvous store, from the job's rendezvous options: the
// entry point the agent and `ddprun status` share. storeAccess() reads the job's security once and
// says where ddprun's store is on the endpoint; makeStoreBackend() turns --rdzv-backend
// (RdzvBackend) into the StoreBackend Membership runs on: ddprun's store (TcpStoreBackend) for
// static and c10d, etcd (EtcdStoreBackend) for etcd. A backend is one more case here and one more
// StoreBackend implementation; neither Membership nor the agent changes. Between the two calls the
// agent may host that store itself (HostedStores::hostOrFind, which says where it listens).
//
// Thread safety: plain functions.
#pragma once

#include <memory>
#include <optional>

#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/security_options.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "stores/store_backend.h"

namespace ddprun::launcher {

// What a process of the job needs to reach its stores.
struct StoreAccess {
  // The job's token and TLS files, read once, for every store it hosts or reaches.
  rendezvous::JobSecurity security;
  // ddprun's store at the job's endpoint as a client reaches it: its address, the wire dialect
  // and the job's security.
  rendezvous::TcpStoreOptions endpoint;
};

// The access of the job whose rendezvous options are `config`. The token and TLS files are read
// by the rule the agents and ddprun-rendezvous share. Throws StoreBackendError: one line naming
// the option as the user gave it. `given`: the token the agent already holds
// (--token-from-stdin), used instead of a token file, which the command line then refuses
// alongside it.
StoreAccess storeAccess(const RendezvousConfig& config,
                        std::optional<rendezvous::JobSecret> given = std::nullopt);

// What a backend may be made of besides the job's rendezvous config: where ddprun's own store is
// (StoreAccess::endpoint, or where this agent hosts it: HostedStores::hostOrFind), for the
// backends built on it.
struct StoreBackendInputs {
  rendezvous::TcpStoreOptions ddprunStore;
};

// The StoreBackend of `config.backend`. Throws StoreBackendError when it cannot be made from what
// the job was given (etcd: a certificate file that cannot be used).
std::unique_ptr<StoreBackend> makeStoreBackend(const RendezvousConfig& config,
                                               const StoreBackendInputs& inputs);

}  // namespace ddprun::launcher
