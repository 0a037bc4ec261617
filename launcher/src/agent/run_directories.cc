#include "agent/run_directories.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/startup_error.h"
#include "process/guardian.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

bool selectsAny(const StreamSelection& selection) {
  if (selection.all.out || selection.all.err) return true;
  for (const auto& [rank, streams] : selection.perRank) {
    if (streams.out || streams.err) return true;
  }
  return false;
}

// mkdtemp of `pattern` (ending in XXXXXX); the path, or nothing with errno set.
std::optional<std::string> freshDirectory(const fs::path& pattern) {
  std::string path = pattern.string();
  if (::mkdtemp(path.data()) == nullptr) return std::nullopt;
  return path;
}

void removeQuietly(const std::string& path) {
  if (path.empty()) return;
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

}  // namespace

RunDirectories::RunDirectories(LaunchConfig& config, Guardian* guardian) {
  const fs::path temp = fs::temp_directory_path();
  if (config.logs.dir.empty() && (selectsAny(config.logs.redirects) || selectsAny(config.logs.tee))) {
    // As torchrun: -r/-t without --log-dir write into a fresh temporary log directory.
    const auto made = freshDirectory(temp / "ddprun_logs_XXXXXX");
    if (!made) {
      throw StartupError(fmt::format("cannot create a temporary log directory ({}); give --log-dir",
                                     std::strerror(errno)));
    }
    config.logs.dir = *made;
    spdlog::warn("--redirects/--tee without --log-dir: the workers' log files go under {}", *made);
  }
  if (config.logs.dir.empty()) {
    const auto made = freshDirectory(temp / fmt::format("ddprun-{}-XXXXXX", ::getpid()));
    if (!made) {
      throw StartupError(fmt::format("cannot create a directory under {} ({}); set TMPDIR to a "
                                     "writable directory", temp.string(), std::strerror(errno)));
    }
    scratchDir_ = *made;
    if (guardian) guardian->removeOnDeath(scratchDir_);  // even after kill -9
  } else {
    std::error_code ignored;
    fs::create_directories(config.logs.dir, ignored);
    const auto made = freshDirectory(fs::path(config.logs.dir) / (config.rdzv.runId + "_XXXXXX"));
    if (!made) {
      throw StartupError(fmt::format("cannot create a log directory under --log-dir {}: {}; give a "
                                     "writable --log-dir", config.logs.dir, std::strerror(errno)));
    }
    logRunDir_ = *made;
    spdlog::info("logs of this run: {}", logRunDir_);
  }
  const auto made = freshDirectory(temp / "ddprun-agent-XXXXXX");
  if (!made) {
    const int error = errno;
    removeQuietly(scratchDir_);
    throw StartupError(fmt::format("cannot create a directory under {} ({}); set TMPDIR to a "
                                   "writable directory", temp.string(), std::strerror(error)));
  }
  privateDir_ = *made;
  if (guardian) guardian->removeOnDeath(privateDir_);
}

RunDirectories::~RunDirectories() {
  removeQuietly(privateDir_);
  if (!keepScratch_) removeQuietly(scratchDir_);
}

}  // namespace ddprun::launcher
