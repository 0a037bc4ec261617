// `ddprun completion bash`: the bash completion script, written from the option table
// (cli/options.h) and the subcommands (cli/subcommands.h), so it offers every option in both
// spellings, each fixed choice after its option, and the subcommands, and never drifts from them.
// The Debian package installs its output as /usr/share/bash-completion/completions/ddprun
// (cmake/DdprunPackage.cmake); without the package: `source <(ddprun completion bash)`.
#pragma once

#include <span>
#include <string>

#include "cli/options.h"
#include "cli/subcommands.h"

namespace ddprun::launcher {

// The script: a function _ddprun and `complete -F _ddprun ddprun`. It completes options
// (--rdzv-b -> --rdzv-backend), an option's choices after it (also as --name=VALUE), the
// subcommands as the first word, and files for the training script, its arguments and every
// value without choices. Throws std::logic_error for a name or choice that is not a plain word
// (the table is ours: a programming error).
std::string bashCompletion(std::span<const cli_detail::OptionSpec> table,
                           const Subcommands& subcommands);

// The subcommand row: `ddprun completion bash`.
Subcommand completionSubcommand();

}  // namespace ddprun::launcher
