#include "core/own_cgroup.h"

#include <sstream>

#include "core/file_text.h"

namespace ddprun::launcher {
namespace {

// /proc files are small; past this, something is wrong and the rest is not needed.
constexpr std::size_t kProcFileLimit = 4u << 20;

}  // namespace

std::optional<std::string> ownCgroup() {
  std::string mount;
  std::istringstream mounts(
      readFileText("/proc/self/mountinfo", nullptr, kProcFileLimit).value_or(""));
  for (std::string line; std::getline(mounts, line);) {
    // "... <mount point> <options> - cgroup2 ..."
    const auto separator = line.find(" - cgroup2 ");
    if (separator == std::string::npos) continue;
    std::istringstream fields(line.substr(0, separator));
    std::string field;
    for (int i = 0; i < 5 && fields >> field; ++i) {
      if (i == 4) mount = field;
    }
    if (!mount.empty()) break;
  }
  if (mount.empty()) return std::nullopt;
  std::istringstream own(readFileText("/proc/self/cgroup", nullptr, kProcFileLimit).value_or(""));
  for (std::string line; std::getline(own, line);) {
    if (line.rfind("0::", 0) == 0)
      return mount + (line.size() > 3 && line[3] == '/' && line.size() == 4 ? "" : line.substr(3));
  }
  return std::nullopt;
}

std::string workerCgroupName(pid_t agent) { return "ddprun-" + std::to_string(agent); }

}  // namespace ddprun::launcher
