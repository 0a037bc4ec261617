// Bootstrap: the store connection every backend exchanges its addresses through.
//
// Keys live under "ddprun/runtime/<run id>/<generation>/<group name>/" so that a restarted or
// re-formed group (new generation) never reads what an earlier one wrote, and two jobs sharing a
// daemon never meet. When options.hostStore is set, rank 0 also runs the store server itself.
#pragma once

#include <memory>
#include <string>

#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/store.h"
#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime::detail {

struct Bootstrap {
  std::unique_ptr<rendezvous::RendezvousServer> server;  // rank 0 with hostStore only
  std::shared_ptr<rendezvous::Store> store;              // namespaced as described above
  std::string keyPrefix;                                 // that namespace, for messages

  // Connects (and on rank 0 with hostStore, listens first). Throws RuntimeError naming
  // MASTER_ADDR:MASTER_PORT: kTimeout when nobody answers within options.timeout.
  static Bootstrap connect(const RuntimeOptions& options);
};

}  // namespace ddprun::runtime::detail
