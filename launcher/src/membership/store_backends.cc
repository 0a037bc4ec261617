#include "membership/store_backends.h"

#include <stdexcept>

#include "membership/etcd_store_backend.h"
#include "membership/membership_keys.h"

namespace ddprun::launcher {

std::unique_ptr<StoreBackend> makeStoreBackend(const RendezvousConfig& config,
                                               const StoreBackendInputs& inputs) {
  // A switch, not a table: a backend added to RdzvBackend without its case here is a compiler
  // warning (-Wswitch), not a job that fails at run time.
  switch (config.backend) {
    case RdzvBackend::kStatic:  // node rank 0's store, which the workers share (the static facet)
    case RdzvBackend::kC10d:    // the store on the endpoint: an agent's or a daemon
      return std::make_unique<TcpStoreBackend>(inputs.ddprunStore);
    case RdzvBackend::kEtcd:  // the members on the endpoint; no agent hosts the rendezvous
      return std::make_unique<EtcdStoreBackend>(etcdClientOptions(config),
                                                etcdKeyPrefix(config.settings.etcdPrefix),
                                                MembershipKeys(config.runId).prefix());
  }
  throw std::logic_error("makeStoreBackend: a rendezvous backend with no StoreBackend");
}

}  // namespace ddprun::launcher
