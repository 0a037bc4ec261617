// The command lines of a launch over ssh: the remote shell command for each host's agent (every
// word shell-quoted, so no argument is ever read by the remote shell) and the ssh client's argv.
// Pure; unit-tested in tests/launcher/host_list_test.cc.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hosts/ssh_launch.h"

namespace ddprun::launcher::hosts {

// One word for a POSIX shell: 'text' with each ' written as '\''. Safe for any bytes but NUL.
std::string shellQuote(std::string_view text);

// The variables forwarded to every host: NCCL_*, PYTHON* and CUDA_VISIBLE_DEVICES where set
// here, and each name in `names` (--forward-env) that is set. Names that are not a shell
// variable name are skipped (the caller checked the user's).
std::map<std::string, std::string> forwardedEnvironment(
    const std::map<std::string, std::string>& environment, const std::vector<std::string>& names);

// Whether `name` may be a variable name: [A-Za-z_][A-Za-z0-9_]*.
bool isVariableName(std::string_view name);

// What the remote shell runs for agent `index`:
//   cd '<dir>' && export K='V'... && exec '<ddprun>' --stop-on-stdin-eof --nnodes=N ...
//       [--token-from-stdin] -- script args
// (no export without variables). ddprun's path is the word after exec, whatever it holds.
std::string remoteCommand(const SshLaunch& launch, std::size_t index);

// The ssh client's argv for agent `index` (argv[0] is the program): the user's options first
// (ssh keeps the first value of an option), then BatchMode (never a password prompt: a failed
// login fails), ConnectTimeout and keep-alives (a host that vanishes ends its ssh in ~15 s),
// then the host and the remote command.
std::vector<std::string> sshArgv(const SshLaunch& launch, std::size_t index);

}  // namespace ddprun::launcher::hosts
