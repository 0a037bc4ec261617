// The relay's handoff for the agent's workers (ddprun/rendezvous/relay_handoff_wire.h): under a
// token, Python workers run with the handoff shim preloaded, and their store connections then go
// to the store without the relay's hop; everything else about them is as through the relay.
//
// Python workers only: theirs is torch's TCPStore client, which cannot prove a token, and an
// interpreter takes a preloaded library as it is. A program given with --no-python may be one
// built with AddressSanitizer, whose runtime refuses to start behind a preloaded library, or a
// static one, which ignores it; those keep the relay's port, which serves them as before.
//
// Thread safety: the agent's main thread, at start-up.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

// The shim and the handoff socket, when the workers take handoffs.
struct RelayHandoffPlan {
  std::string shim;    // the shim library's absolute path
  std::string socket;  // where the relay listens for handoffs: in the agent's private directory
};

// Nothing when the workers take no handoffs (not Python, the shim is missing, or the socket's path
// is too long for one): then they all go through the relay's port.
std::optional<RelayHandoffPlan> planRelayHandoff(const LaunchConfig& config,
                                                 const std::filesystem::path& privateDir);

// Gives the workers the shim: LD_PRELOAD (after what is preloaded already, so a library the user
// preloads keeps its place) and DDPRUN_RELAY_HANDOFF=`variable` (LoopbackRelay::handoffVariable;
// nothing when it is empty: the relay listens for no handoffs).
void addRelayHandoff(const RelayHandoffPlan& plan, const std::string& variable,
                     std::map<std::string, std::string>& environment);

}  // namespace ddprun::launcher
