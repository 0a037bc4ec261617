#include "stores/store_backends.h"

#include <stdexcept>

#include <fmt/format.h>

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

rendezvous::JobSecurity loadRendezvousSecurity(const RendezvousSettings& settings,
                                               std::optional<rendezvous::JobSecret> given) {
  const rendezvous::JobSecurityFiles files{settings.tokenFile,
                                           {settings.tlsCert, settings.tlsKey, settings.tlsCa}};
  if (given && !settings.tokenFile.empty()) {
    throw std::logic_error("loadRendezvousSecurity: a token given and a token file");
  }
  try {
    rendezvous::JobSecurity security =
        rendezvous::loadJobSecurity(files, rendezvous::kAgentSecurityOptions);
    if (given) security.secret = std::move(given);
    return security;
  } catch (const rendezvous::JobSecurityError& error) {
    // Which option the line is about, as the user gave it.
    const char* option = error.code() == rendezvous::JobSecurityError::Code::kTokenFile
                             ? "--rdzv-conf token_file"
                             : "--rdzv-conf";
    throw StoreBackendError(fmt::format("{}: {}", option, error.what()));
  }
}

rendezvous::TcpStoreOptions rendezvousStoreOptions(const RendezvousConfig& config,
                                                   const rendezvous::JobSecurity& security) {
  rendezvous::TcpStoreOptions store;
  store.dialect = rendezvous::WireDialect::kTorch2;
  store.host = config.host;
  store.port = config.port;
  store.secret = security.secret;
  store.tls = security.tls;
  return store;
}

}  // namespace ddprun::launcher
