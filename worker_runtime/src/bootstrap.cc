#include "bootstrap.h"

#include <fmt/format.h>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/prefix_store.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::runtime::detail {

Bootstrap Bootstrap::connect(const RuntimeOptions& options) {
  Bootstrap bootstrap;
  const std::string where = fmt::format("{}:{}", options.masterAddr, options.masterPort);
  if (options.hostStore && options.rank == 0) {
    rendezvous::ServerOptions serverOptions;
    serverOptions.host = options.masterAddr;
    serverOptions.port = static_cast<std::uint16_t>(options.masterPort);
    try {
      bootstrap.server = std::make_unique<rendezvous::RendezvousServer>(serverOptions);
    } catch (const rendezvous::ServerError& error) {
      throw RuntimeError(RuntimeError::Kind::kUnavailable,
                         fmt::format("rank 0 cannot host the store: {}", error.what()));
    }
    bootstrap.server->start();
  }

  rendezvous::TcpStoreOptions storeOptions;
  storeOptions.host = options.masterAddr;
  storeOptions.port = static_cast<std::uint16_t>(options.masterPort);
  storeOptions.timeout = options.timeout;
  storeOptions.connectTimeout = options.timeout;
  std::shared_ptr<rendezvous::Store> tcp;
  try {
    tcp = std::make_shared<rendezvous::TcpStore>(storeOptions);
  } catch (const rendezvous::StoreError& error) {
    throw RuntimeError(
        RuntimeError::Kind::kTimeout,
        fmt::format("rank {} cannot reach the store at {} ({}): start the program under ddprun, or "
                    "check MASTER_ADDR/MASTER_PORT and that rank 0 is running",
                    options.rank, where, error.what()));
  }
  bootstrap.keyPrefix =
      fmt::format("ddprun/runtime/{}/{}/{}", options.runId, options.generation, options.groupName);
  bootstrap.store = std::make_shared<rendezvous::PrefixStore>(std::move(tcp), bootstrap.keyPrefix);
  return bootstrap;
}

}  // namespace ddprun::runtime::detail
