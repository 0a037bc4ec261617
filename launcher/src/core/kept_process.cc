#include "core/kept_process.h"

#include <utility>

#include "core/file_text.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {
namespace {

// An environment is bounded by the kernel's argument limits (ARG_MAX, a few MiB at most); past
// this, the rest is not read.
constexpr std::size_t kEnvironLimit = 8u << 20;

}  // namespace

std::string keptEntry(std::string_view agentMarker) {
  if (agentMarker.empty()) return {};
  return std::string(common::kEnvDdprunDetached) + "=" + std::string(agentMarker);
}

std::map<std::string, std::string> detachedEnvironment(
    std::map<std::string, std::string> environment) {
  const auto marker = environment.find(common::kEnvDdprunAgent);
  if (marker == environment.end()) return environment;
  std::string value = std::move(marker->second);
  environment.erase(marker);
  // An empty marker keeps nothing (keptEntry): leave no variable that would suggest otherwise.
  if (!value.empty()) environment[common::kEnvDdprunDetached] = std::move(value);
  return environment;
}

bool environHolds(std::string_view bytes, std::string_view entry) {
  if (entry.empty()) return false;
  std::size_t start = 0;
  while (start < bytes.size()) {
    const std::size_t nul = bytes.find('\0', start);
    const std::size_t end = nul == std::string_view::npos ? bytes.size() : nul;
    if (bytes.substr(start, end - start) == entry) return true;
    start = end + 1;
  }
  return false;
}

std::optional<std::string> readEnviron(pid_t pid) {
  return readFileText("/proc/" + std::to_string(pid) + "/environ", nullptr, kEnvironLimit);
}

}  // namespace ddprun::launcher
