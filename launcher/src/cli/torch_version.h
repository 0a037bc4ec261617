// The torch a job's workers would import, read from their interpreter without importing it:
// `ddprun launch` passes torch.distributed.launch's local-rank argument in the spelling of that
// torch (1.x `--local_rank`, 2.x `--local-rank`).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "cli/helpers.h"

namespace ddprun::launcher::cli_detail {

// "1.13.1", "2.6.0+cpu": torch's own __version__ as `python` finds the package (its version.py,
// read as text: no import of torch, so tens of milliseconds, not seconds). Nothing when that
// interpreter has no torch, cannot be run, or says nothing within `timeout`.
std::optional<std::string> torchVersionOf(
    const std::string& python, const Environment& environment,
    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The major version of a torch version string ("2.6.0+cpu" -> 2), or nothing.
std::optional<int> torchMajor(const std::string& version);

}  // namespace ddprun::launcher::cli_detail
