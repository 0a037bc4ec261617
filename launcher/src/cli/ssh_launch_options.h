// --hosts / --hostfile: the command line of a launch over ssh -> hosts::SshLaunch (the driver's
// plan, hosts/ssh_launch.h). The job's own options are checked here as for one node, before any
// ssh starts, so a typo is one line here and not one per host.
#pragma once

#include <functional>
#include <map>
#include <string_view>

#include "cli/cli.h"
#include "cli/given_values.h"

namespace ddprun::launcher::cli_detail {

// Whether the options given ask for a launch over ssh (--hosts or --hostfile). Without one,
// --include, --exclude, --forward-env, --ssh-options and --ssh-ddprun are errors: this throws.
bool wantsSshLaunch(const std::map<std::string_view, GivenValue>& given);

// The options that only the driver reads; the agents on the hosts never get them.
bool isDriverOption(std::string_view name);

// The CommandLine of a launch over ssh: config holds the job's options checked as for one node
// (the rendezvous ones left out: the driver sets them), sshLaunch the plan. `validate` checks
// the options it is given as buildConfig does. Throws UsageError.
CommandLine sshCommandLine(
    const std::map<std::string_view, GivenValue>& given, const Environment& environment,
    const std::function<CommandLine(std::map<std::string_view, GivenValue>)>& validate);

}  // namespace ddprun::launcher::cli_detail
