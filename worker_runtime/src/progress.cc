// reportProgress(): sets the modification time of the worker's heartbeat file
// (DDPRUN_HEARTBEAT_FILE) to now, which is all the agent looks at
// (launcher/src/hang/progress_monitor.h).
// Rate-limited so that a tight loop of small collectives costs a clock read per call, not a
// system call.
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "ddprun/common/worker_env_names.h"
#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime {
namespace {

// Reports closer together than this add nothing: the agent's hang timeouts are seconds.
constexpr std::chrono::milliseconds kMinInterval{50};

const std::string& heartbeatFile() {
  static const std::string path = [] {
    const char* value = std::getenv(common::kEnvDdprunHeartbeatFile);
    return std::string(value == nullptr ? "" : value);
  }();
  return path;
}

}  // namespace

void reportProgress() noexcept {
  const std::string& path = heartbeatFile();
  if (path.empty()) return;
  static std::atomic<std::int64_t> lastReport{std::numeric_limits<std::int64_t>::min() / 2};
  const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = lastReport.load(std::memory_order_relaxed);
  if (now - last < kMinInterval.count()) return;
  // One thread of many reports; the others have nothing to add.
  if (!lastReport.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // times = null: now
}

}  // namespace ddprun::runtime
