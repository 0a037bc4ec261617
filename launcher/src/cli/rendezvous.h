// How the nodes find each other: --standalone, the backend, the endpoint (or --master-addr and
// --master-port), the run id and --rdzv-conf, resolved into result.config.rdzv.
#pragma once

#include "cli/arguments.h"
#include "cli/cli.h"

namespace ddprun::launcher::cli_detail {

// Expects result.config.rdzv's node counts, node rank and master address/port already set.
// Resolves host names; throws UsageError; appends warnings for settings that are ignored.
void resolveRendezvous(const Arguments& arguments, CommandLine& result);

}  // namespace ddprun::launcher::cli_detail
