// `ddprun launch`: a job written for `python -m torch.distributed.launch`, run unchanged. That
// launcher takes torchrun's command line plus --use-env (--use_env) and, unless --use-env is
// given, passes each worker its local rank as an argument right after the training script,
// before the script's own: `--local_rank=N` from torch 1.x, `--local-rank=N` from torch 2.x.
// `ddprun launch` reads the same command line, decides the spelling from the torch the workers'
// interpreter has (or `--local-rank-arg`), and runs the job as `ddprun` runs torchrun's.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/subcommands.h"

namespace ddprun::launcher {

using Environment = std::map<std::string, std::string>;

// The torch version the workers' interpreter has, or nothing (cli/torch_version.h in the binary,
// a fixed answer in tests).
using TorchVersionProbe = std::function<std::optional<std::string>(const std::string& python)>;

struct LegacyLaunch {
  bool helpRequested = false;
  std::string helpText;
  std::vector<std::string> argv;  // ddprun's own command line, argv[0] included
  std::string note;               // the one line that says what `launch` adds; "" with --use-env
};

// `args`: the words after `launch`. Throws UsageError for bad input.
LegacyLaunch legacyLaunchCommandLine(const std::vector<std::string>& args,
                                     const Environment& environment,
                                     const TorchVersionProbe& probe);

// The `launch` row: translates, says the note, and hands ddprun's command line to `runJob` (the
// job's own path in main.cc, which this room may not include).
using RunJob = std::function<int(const std::vector<std::string>& argv, const Environment&)>;
Subcommand launchSubcommand(RunJob runJob);

}  // namespace ddprun::launcher
