#include "stores/store_backends.h"

#include <fmt/format.h>

#include <stdexcept>

#include "stores/etcd_store_backend.h"
#include "stores/store_keys.h"

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
      return std::make_unique<EtcdStoreBackend>(
          etcdClientOptions(config), etcdKeyPrefix(config.settings.etcdPrefix),
          runKeyPrefix(config.runId), !config.settings.tokenFile.empty());
  }
  throw std::logic_error("makeStoreBackend: a rendezvous backend with no StoreBackend");
}

StoreAccess storeAccess(const RendezvousConfig& config,
                        std::optional<rendezvous::JobSecret> given) {
  const RendezvousSettings& settings = config.settings;
  const rendezvous::JobSecurityFiles files{settings.tokenFile,
                                           {settings.tlsCert, settings.tlsKey, settings.tlsCa}};
  if (given && !settings.tokenFile.empty()) {
    throw std::logic_error("storeAccess: a token given and a token file");
  }
  StoreAccess access;
  try {
    access.security = rendezvous::loadJobSecurity(files, rendezvous::kAgentSecurityOptions);
  } catch (const rendezvous::JobSecurityError& error) {
    // Which option the line is about, as the user gave it.
    const char* option = error.code() == rendezvous::JobSecurityError::Code::kTokenFile
                             ? "--rdzv-conf token_file"
                             : "--rdzv-conf";
    throw StoreBackendError(fmt::format("{}: {}", option, error.what()));
  }
  if (given) access.security.secret = std::move(given);
  access.endpoint.dialect = rendezvous::WireDialect::kTorch2;
  access.endpoint.host = config.host;
  access.endpoint.port = config.port;
  access.endpoint.secret = access.security.secret;
  access.endpoint.tls = access.security.tls;
  return access;
}

}  // namespace ddprun::launcher
