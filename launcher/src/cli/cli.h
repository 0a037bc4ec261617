// The ddprun command line: argv plus the PET_* environment -> a validated LaunchConfig.
//
// torchrun 2.x compatible: every option in both spellings (--nproc-per-node, --nproc_per_node),
// the short forms -m/-r/-t/-h, "--opt value" and "--opt=value", unique prefixes of long options
// as argparse allows them (--nproc_per 2, --redirect=3; an ambiguous one is an error naming the
// candidates), and each option's PET_<DEST> environment fallback (command line > PET_ > default;
// exact variable names only). Unlike torchrun: everything after the training script is passed
// through untouched (no prefix or option there is ever read as ddprun's), and every bad input is
// reported up front as one UsageError line instead of a traceback (or a failure minutes later).
//
// Ahead of that grammar, `ddprun SUBCOMMAND ARGS...` (subcommands.h): the first argument selects
// a subcommand only when it is exactly one's name, and a name is [a-z][a-z0-9-]*, so a path (with
// a '/') or a .py file is never one. A training script named like a subcommand, say `status`,
// runs as `ddprun ./status`, `ddprun -- status`, or after any option
// (`ddprun --nproc-per-node 2 status`). main.cc asks ddprunSubcommands().select() first, then
// parseCommandLine().
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/subcommands.h"
#include "ddprun/launcher/launch_config.h"
#include "hosts/ssh_launch.h"

namespace ddprun::launcher {

// Bad input: what() is ONE line naming the problem and the fix, e.g.
//   "--nnodes '3:2': MIN (3) is larger than MAX (2); use --nnodes MIN:MAX with MIN <= MAX"
// The caller prints "ddprun: error: <what()>" and exits 2 (exitCode(Ending::badInput(...))).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommandLine {
  LaunchConfig config;
  bool helpRequested = false;     // --help / -h: text in helpText
  bool versionRequested = false;  // --version: print versionText()
  std::string helpText;
  std::vector<std::string> warnings;  // one line each, no "warning:" prefix; printed by the caller
  // What ddprun does differently from torchrun with the same input, said once, not a problem:
  // one line each, no "note:" prefix; printed by the caller (whatever LOGLEVEL says).
  std::vector<std::string> notes;
  // The interpreter the workers run under, when ddprun took it from PATH (no PYTHON_EXEC): a note
  // of its own, printed after `notes`, since it is said for every such job ("" otherwise).
  std::string interpreterNote;
  // --hosts / --hostfile: a launch over ssh (docs/ssh.md), run by hosts::runSshDriver instead of
  // an agent; config then holds the job's options as checked for one node.
  std::optional<hosts::SshLaunch> sshLaunch;
};

// argv as given to main; environment as NAME -> value (the caller passes the real environment).
// Reads the file system (script, PATH, --log-dir, /proc/driver/nvidia) and resolves host names,
// but starts nothing. Throws UsageError for every bad input.
CommandLine parseCommandLine(int argc, const char* const* argv,
                             const std::map<std::string, std::string>& environment);

// "ddprun <version>", for --version.
std::string versionText();

}  // namespace ddprun::launcher
