// `ddprun status --rdzv-endpoint H:P --rdzv-id ID [--rdzv-backend c10d|etcd] [--rdzv-conf ...]
// [--json]`: what a running job is doing, read from its rendezvous (docs/status.md). It reads
// every node's published snapshot (membership/status_publisher.h) and writes nothing: no hold, no
// claim of the store, so asking never disturbs the job. Its own room, above cli/ (the options,
// read by the agent's rules) and membership/ (the store seam): main.cc adds its row to the
// subcommand table.
//
// Thread safety: runs on main's thread.
#pragma once

#include "cli/subcommands.h"

namespace ddprun::launcher {

// The subcommand's row (name, summary, run).
Subcommand statusSubcommand();

}  // namespace ddprun::launcher
