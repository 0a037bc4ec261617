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
  // `timeout`: the static backend's and torch's legacy etcd backend's join timeout.
  std::optional<std::chrono::milliseconds> timeout;
  bool joinTimeoutGiven = false;
};

// Keys and values are stripped. A key the chosen backend reads is checked strictly: a bad value
// is a UsageError naming the fix. A key it does not read (unknown to ddprun, or the other
// backend's: `timeout` is static's and etcd's, is_host c10d's, cacert etcd's) is ignored whatever
// its value, as torchrun
// ignores it, with one warning per key in `warnings`; torchrun says nothing, so a typo such as
// join_timout=5 would go unnoticed. A value wrapped in quotes no shell removed keeps them, as in
// torchrun, with a warning. Unlike torchrun, an empty entry (a trailing comma) is tolerated.
// A missing key or value is a UsageError for any key, as in torchrun.
RdzvConf parseRdzvConf(const GivenValue& given, RdzvBackend backend,
                       std::vector<std::string>& warnings);

}  // namespace ddprun::launcher::cli_detail
