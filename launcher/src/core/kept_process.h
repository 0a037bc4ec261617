// Keeping a process after the job on purpose (`ddprun detach`; docs/env_contract.md, "Keeping a
// process after the job"): the one rule for which process the agent spares. The detach
// subcommand writes it (cli/detach.cc); the agent's stray sweep (process/posix_launcher.cc) and
// the guardian (process/guardian.cc) read it.
//
// A process is kept when its environment holds DDPRUN_DETACHED=<agent marker>, the exact value of
// the DDPRUN_AGENT entry that `ddprun detach` took out of it. The value is this agent's marker,
// never a bare flag: the workers of a job started from a kept process inherit the variable, and
// must not spare their own strays because of it (their agent has another marker).
//
// Thread safety: pure functions (readEnviron reads /proc).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

// "DDPRUN_DETACHED=<marker>": the entry that keeps a process of the agent whose workers carry
// DDPRUN_AGENT=<marker>. "" for an empty marker (no marker: nothing is ever kept).
std::string keptEntry(std::string_view agentMarker);

// The environment `ddprun detach` hands its command: DDPRUN_AGENT taken out (the guardian's sweep
// looks for it) and DDPRUN_DETACHED set to its value. Unchanged without a DDPRUN_AGENT entry (not
// under ddprun: there is no job to be kept from).
std::map<std::string, std::string> detachedEnvironment(
    std::map<std::string, std::string> environment);

// Whether `bytes` (those of /proc/<pid>/environ: "NAME=value" entries, each ended by a
// NUL, the last one perhaps not) holds `entry` as one whole entry. Never for an empty entry.
bool environHolds(std::string_view bytes, std::string_view entry);

// The bytes of /proc/<pid>/environ (bounded: an environment fits the kernel's argument limits),
// or nothing when it cannot be read (gone, another user's, a zombie's is empty).
std::optional<std::string> readEnviron(pid_t pid);

}  // namespace ddprun::launcher
