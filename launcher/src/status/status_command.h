// `ddprun status --rdzv-endpoint H:P --rdzv-id ID [--rdzv-backend c10d|etcd] [--rdzv-conf ...]
// [--json]`: what a running job is doing, read from its rendezvous (docs/status.md). It reads
// every node's published snapshot (membership/status_publisher.h) and writes nothing: no hold, no
// claim of the store, so asking never disturbs the job. Its own room, above cli/ (the options,
// read by the agent's rules) and membership/ (the store seam): main.cc adds its row to the
// subcommand table.
//
// Thread safety: runs on main's thread.
#pragma once

#include <string>

#include "cli/subcommands.h"
#include "ddprun/rendezvous/store.h"
#include "status/job_status.h"

namespace ddprun::launcher {

// Every node's snapshot under run `runId`, read with one listing and one read per node; when
// there is none, the round records (JobStatus::records). A value that is not a snapshot, or over
// the limit, is that node's problem: set aside and named (JobStatus::unreadable), never read
// whole. Reads only. Throws StoreError when the store fails.
JobStatus readJob(rendezvous::Store& store, const std::string& runId);

// The subcommand's row (name, summary, run).
Subcommand statusSubcommand();

}  // namespace ddprun::launcher
