// --rdzv-conf key=value,key=value -> typed RendezvousSettings. ddprun checks values now instead
// of at rendezvous time, and stores them typed, so nothing downstream parses text.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/given_values.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher::cli_detail {

// torchrun's `timeout` for the static backend when none is given (its LaunchConfig injects it).
inline constexpr std::chrono::milliseconds kStaticTimeout{900000};

// --rdzv-conf as given: the typed settings, plus what depends on the backend (resolved later).
struct RdzvConf {
  RendezvousSettings settings;
  std::optional<std::chrono::milliseconds> staticTimeout;  // `timeout`
  bool joinTimeoutGiven = false;
};

// Keys and values are stripped. Unknown keys are warned about (one line each in `warnings`) and
// dropped; torchrun drops them silently, so a typo such as join_timout=5 goes unnoticed. Unlike
// torchrun, an empty entry (a trailing comma) is tolerated. Throws UsageError.
RdzvConf parseRdzvConf(const GivenValue& given, std::vector<std::string>& warnings);

}  // namespace ddprun::launcher::cli_detail
