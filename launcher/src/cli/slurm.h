// Inside a Slurm job step, ddprun needs no rendezvous flags (docs/slurm.md): the step's
// environment says how many nodes there are, which one this is, and which hosts they are, so
// `srun --ntasks-per-node=1 ddprun --nproc-per-node 8 train.py` is the whole command.
//
// Rules (docs/slurm.md says them for users):
//   - Slurm is used only when none of the options that say where the job meets is given, on the
//     command line or as PET_*: --nnodes, --node-rank, --rdzv-backend, --rdzv-endpoint,
//     --rdzv-id, --master-addr, --master-port, --standalone. They are taken as a whole: one of
//     them given and ddprun reads no Slurm variable (a note says so), so a half-Slurm,
//     half-flags job is never made up. --rdzv-conf and --local-addr are not among them: they tune
//     the rendezvous, and combine with Slurm's.
//   - From the step: nnodes = SLURM_STEP_NUM_NODES (never SLURM_NNODES, which is the
//     allocation's outside srun), c10d with the store on the first host of SLURM_STEP_NODELIST,
//     hosted by SLURM_NODEID 0 (is_host), port 20000 + 10 * (job id % 1000) + step id % 10 (or
//     $DDPRUN_SLURM_PORT), run id slurm-<job>.<step>.
//   - One ddprun per node: several tasks of the step on a node is an error, as is a Slurm job
//     without a step (ddprun run in the batch script or an salloc shell): both name srun.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/given_values.h"
#include "cli/helpers.h"

namespace ddprun::launcher::cli_detail {

// The step as ddprun uses it.
struct SlurmStep {
  std::string jobId;               // digits
  std::string stepId;              // digits
  int nodes = 0;                   // SLURM_STEP_NUM_NODES
  int nodeId = 0;                  // SLURM_NODEID: 0..nodes-1
  std::vector<std::string> hosts;  // SLURM_STEP_NODELIST expanded, nodes of them
  std::uint16_t port = 0;
  bool portOverridden = false;  // from DDPRUN_SLURM_PORT
  std::string nodelist;         // as Slurm wrote it, for the note

  std::string runId() const { return "slurm-" + jobId + "." + stepId; }
  const std::string& storeHost() const { return hosts.front(); }
};

// The store's port for a step: 20000 + 10 * (job % 1000) + step % 10, in 20000..29999 (below
// Linux's ephemeral ports, 32768 and up): distinct for the last 1000 jobs and ten steps of each.
std::uint16_t slurmStorePort(std::uint64_t jobId, std::uint64_t stepId);

// The rendezvous options whose presence turns Slurm off, in the order they are named.
const std::vector<const char*>& slurmOverridingOptions();

// Reads the environment when Slurm applies. Nothing outside Slurm (no SLURM_JOB_ID); also
// nothing when one of slurmOverridingOptions() is among `given`, with a note in `notes` when this
// is a Slurm step. Throws UsageError for a Slurm job without a step, a step with several tasks on
// a node, and Slurm variables it cannot read.
std::optional<SlurmStep> detectSlurmStep(const std::map<std::string_view, GivenValue>& given,
                                         const Environment& environment,
                                         std::vector<std::string>& notes);

// Adds the step's values as given options (origin: the Slurm variable), so that they are checked
// and resolved as PET_ values are.
void addSlurmValues(const SlurmStep& step, std::map<std::string_view, GivenValue>& given);

// After the config is built: is_host (unless --rdzv-conf gave it), this node's address (an IP
// literal in the node list; names are left to route detection, which knows Debian's
// 127.0.1.1 trap), where the port came from, and the one-line note.
void applySlurmStep(const SlurmStep& step, CommandLine& result);

}  // namespace ddprun::launcher::cli_detail
