#include "agent/relay_handoff.h"

#include <spdlog/spdlog.h>
#include <sys/un.h>

#include "ddprun/common/text.h"
#include "ddprun/rendezvous/relay_handoff_wire.h"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

constexpr const char* kShimName = "libddprun-relay-handoff.so";

// The shim beside ddprun (the build tree), else where it is installed, relative to ddprun's own
// directory: `<prefix>/bin/ddprun` and `<prefix>/<libdir>/ddprun/<shim>`.
std::optional<fs::path> findShim() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return std::nullopt;
  const fs::path here = self.parent_path();
  for (const fs::path& candidate :
       {here / kShimName, here.parent_path() / DDPRUN_INSTALL_LIBDIR / "ddprun" / kShimName}) {
    if (fs::is_regular_file(candidate, error)) return candidate;
  }
  return std::nullopt;
}

// LD_PRELOAD separates its entries with spaces and colons; a path with either cannot be one.
bool preloadable(const std::string& path) { return path.find_first_of(" :") == std::string::npos; }

}  // namespace

std::optional<RelayHandoffPlan> planRelayHandoff(const LaunchConfig& config,
                                                 const fs::path& privateDir) {
  if (config.entry.kind == EntryKind::kExecutable) return std::nullopt;
  const auto shim = findShim();
  if (!shim || !preloadable(shim->string())) {
    spdlog::debug(
        "workers' store relay: no handoff shim ({}); every store connection goes "
        "through the relay",
        shim ? common::printable(shim->string()) : "not found");
    return std::nullopt;
  }
  RelayHandoffPlan plan{shim->string(), (privateDir / "relay.sock").string()};
  if (plan.socket.size() >= sizeof(sockaddr_un{}.sun_path)) return std::nullopt;
  return plan;
}

void addRelayHandoff(const RelayHandoffPlan& plan, const std::string& variable,
                     std::map<std::string, std::string>& environment) {
  if (variable.empty()) return;
  std::string& preload = environment["LD_PRELOAD"];
  preload = preload.empty() ? plan.shim : preload + " " + plan.shim;
  environment[DDPRUN_RELAY_HANDOFF_ENV] = variable;
}

}  // namespace ddprun::launcher
