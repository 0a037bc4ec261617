// The rendezvous options alone, for a command that reaches a running job's rendezvous instead of
// joining it (`ddprun status`): --rdzv-backend, --rdzv-endpoint, --rdzv-id and --rdzv-conf (the
// token and TLS files are --rdzv-conf keys), with their PET_RDZV_* variables, read by the agent's
// own rules (rendezvous.cc, rdzv_conf.cc): one copy of each, so a job's command line and its
// status command accept the same values and say the same about bad ones.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace ddprun::launcher {

// `args`: options only (the command's own flags already taken out). The backend is c10d unless
// given (the rendezvous of a multi-node job; the static backend's store is reached the same
// way). Only PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID and PET_RDZV_CONF are read from
// `environment`: a job's other PET_ variables (PET_STANDALONE) say nothing about where it is.
// Throws UsageError naming `command` for any other option or a positional argument.
CommandLine parseRendezvousOptions(const std::string& command, const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& environment);

}  // namespace ddprun::launcher
