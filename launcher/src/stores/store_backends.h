// The rendezvous backends by name: the one place that turns --rdzv-backend (RdzvBackend) into the
// StoreBackend Membership runs on: ddprun's store (TcpStoreBackend) for static and c10d, etcd
// (EtcdStoreBackend) for etcd. A backend is one more case here and one more StoreBackend
// implementation; neither Membership nor the agent changes.
//
// Thread safety: a plain function.
#pragma once

#include <memory>
#include <optional>

#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/security_options.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "stores/store_backend.h"

namespace ddprun::launcher {

// What a backend may be made of besides the job's rendezvous config: where ddprun's own store is
// (the agent hosts it or found it: HostedStores::hostOrFind), for the backends built on it.
struct StoreBackendInputs {
  rendezvous::TcpStoreOptions ddprunStore;
};

// The StoreBackend of `config.backend`. Throws StoreBackendError when it cannot be made from what
// the job was given (etcd: a certificate file that cannot be used).
std::unique_ptr<StoreBackend> makeStoreBackend(const RendezvousConfig& config,
                                               const StoreBackendInputs& inputs);

// The job's token and TLS files (--rdzv-conf token_file, tls_*), read once, by the rule the
// agents and ddprun-rendezvous share. Throws StoreBackendError: one line naming the option as the
// user gave it. `given`: the token the agent already holds (--token-from-stdin), used instead of a
// token file, which the command line then refuses alongside it.
rendezvous::JobSecurity loadRendezvousSecurity(
    const RendezvousSettings& settings, std::optional<rendezvous::JobSecret> given = std::nullopt);

// How a client reaches ddprun's store at the job's endpoint (the agent that finds it hosted, or
// `ddprun status`): its address, the wire dialect and the job's security.
rendezvous::TcpStoreOptions rendezvousStoreOptions(const RendezvousConfig& config,
                                                   const rendezvous::JobSecurity& security);

}  // namespace ddprun::launcher
