// Stage 1 of the command line: argv -> the options ddprun was given and where the training
// script starts; then the PET_<DEST> fallbacks for options the command line did not give. Each
// value is kept with where it came from, so that every message can name its source, and the
// phrasing helpers here build the parts of messages every later stage shares.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "cli/helpers.h"
#include "cli/options.h"

namespace ddprun::launcher::cli_detail {

// One option's raw value and where it came from.
struct GivenValue {
  const OptionSpec* spec = nullptr;
  std::string value;   // "" for flags
  std::string origin;  // "--nproc_per_node" or "-r" as typed, or "PET_NPROC_PER_NODE"
  bool fromEnvironment = false;
};

// "--max-restarts 'abc'", the start of most messages.
std::string label(const GivenValue& given);
// How to write a corrected value where it came from: "--max-restarts 3" or "PET_MAX_RESTARTS=3".
std::string example(const GivenValue& given, std::string_view value);

struct SplitArguments {
  std::map<std::string_view, GivenValue> options;  // by canonical name; the last one given wins
  int scriptIndex = -1;                            // argv index of training_script; -1 = none
};

// Walks argv (from argv[1]) with the option table up to the first positional argument, the
// training script, or "--". Everything from the training script on is never looked at again,
// so script arguments such as "--nproc-per-node 9" or "-m" cannot be taken for ddprun options
// (torchrun's argparse can: pytorch issue #120601). Throws UsageError.
SplitArguments splitArguments(int argc, const char* const* argv);

// Adds PET_<DEST> for each option the command line did not give (command line > PET_).
void addEnvironmentFallbacks(SplitArguments& split, const Environment& environment);

}  // namespace ddprun::launcher::cli_detail
