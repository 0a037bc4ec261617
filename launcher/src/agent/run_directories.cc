#include "agent/run_directories.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "agent/startup_error.h"
#include "ddprun/common/safe_files.h"
#include "ddprun/common/text.h"
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

void removeQuietly(const std::string& path) {
  if (path.empty()) return;
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// Why a candidate temporary directory cannot be used, or nothing when it can: an existing
// directory this process can create files in (access(2) also says EROFS for a read-only mount).
std::optional<std::string> unusableBecause(const fs::path& candidate) {
  std::error_code error;
  if (!fs::is_directory(candidate, error)) {
    return error ? error.message()
                 : std::string(fs::exists(candidate) ? "not a directory" : "it does not exist");
  }
  if (::access(candidate.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return std::nullopt;
}

}  // namespace

fs::path temporaryDirectoryFor(const std::map<std::string, std::string>& environment) {
  // Python's tempfile.gettempdir(), which torchrun's directories come from: TMPDIR, TEMP, TMP,
  // then /tmp, /var/tmp, /usr/tmp, then the working directory; the first usable one, made
  // absolute (a worker that changes directory must still find its files).
  std::vector<std::pair<std::string, fs::path>> candidates;
  for (const char* name : {"TMPDIR", "TEMP", "TMP"}) {
    if (auto it = environment.find(name); it != environment.end() && !it->second.empty()) {
      candidates.emplace_back(fmt::format("{}={}", name, it->second), it->second);
    }
  }
  for (const char* path : {"/tmp", "/var/tmp", "/usr/tmp"}) candidates.emplace_back(path, path);
  std::error_code error;
  const fs::path workingDirectory = fs::current_path(error);
  if (!error) candidates.emplace_back("the working directory", workingDirectory);
  std::vector<std::string> skipped;
  for (const auto& [label, path] : candidates) {
    if (const auto why = unusableBecause(path)) {
      skipped.push_back(fmt::format("{} ({})", common::printable(label), *why));
      continue;
    }
    const fs::path chosen = fs::absolute(path, error).lexically_normal();
    if (!skipped.empty()) {
      spdlog::warn(
          "temporary files go under {}: {} is not usable, as Python's tempfile would skip it",
          chosen.string(), fmt::join(skipped, ", "));
    }
    return chosen;
  }
  throw StartupError(
      fmt::format("no usable temporary directory: {}; set TMPDIR to a writable directory",
                  fmt::join(skipped, ", ")));
}

namespace {

// The directory the run's private and scratch directories go into (temporaryDirectoryFor), once
// checked. Everything the agent makes there is a fresh mkdtemp (mode 0700), which is safe in a
// directory everyone can write into as long as it is sticky (as /tmp): no one else may then
// rename or remove the agent's directory and put a link of theirs in its place. Without the
// sticky bit, or in a directory another user owns, someone else could do just that, and the
// private directory holds the stack hook's sitecustomize.py, which every Python worker runs: so
// every exposure is refused here (a group-writable TMPDIR too), not warned about.
fs::path temporaryDirectory(const std::map<std::string, std::string>& environment) {
  const fs::path temp = temporaryDirectoryFor(environment);
  const auto exposures = common::directoryExposures(temp.string());
  if (!exposures.empty()) {
    throw StartupError(fmt::format(
        "the temporary directory {} is not safe for the agent's files: {}, so another user could "
        "replace them; set TMPDIR to a directory that only you and root can write into (or a "
        "sticky one, as /tmp)",
        temp.string(), exposures.front().describe()));
  }
  return temp;
}

// --log-dir, once made. Another user who owns it (or a directory above it), or a directory every
// user can write into without the sticky bit, could rename this run's directory away and put a
// link in its place, leading the agent's and the workers' files (logs, error files) wherever
// they like: refused, and an existing directory of another user is never adopted. A directory
// its group can write into is only warned about: shared group directories for a project's logs
// are a common, deliberate setup, and what lands there is logs, not code the workers run.
void checkLogDirectory(const std::string& logDir) {
  const auto exposures = common::directoryExposures(logDir);
  for (const auto& exposure : exposures) {
    if (exposure.exposure == common::Exposure::kGroupWritable) continue;
    throw StartupError(fmt::format(
        "--log-dir {}: {}, so another user could replace this run's log directory; give a "
        "--log-dir that only you and root can write into (or chown/chmod it)",
        logDir, exposure.describe()));
  }
  if (!exposures.empty()) {
    spdlog::warn(
        "--log-dir {}: {}: its members could replace this run's log directory (chmod g-w "
        "or +t it if they should not)",
        logDir, exposures.front().describe());
  }
}

// mkdtemp of `pattern` (ending in XXXXXX), or StartupError saying `fix`.
std::string freshDirectory(const fs::path& pattern, const std::string& where,
                           const std::string& fix) {
  auto made = common::makePrivateDirectory(pattern.string());
  if (!made) {
    throw StartupError(fmt::format("cannot create a directory under {} ({}); {}", where,
                                   made.error().describe(), fix));
  }
  return made.value();
}

}  // namespace

RunDirectories::RunDirectories(LaunchConfig& config,
                               const std::map<std::string, std::string>& environment,
                               Guardian* guardian) {
  const fs::path temp = temporaryDirectory(environment);
  const std::string tempFix = "set TMPDIR to a writable directory";
  if (config.logs.dir.empty() &&
      (selectsAny(config.logs.redirects) || selectsAny(config.logs.tee))) {
    // As torchrun: -r/-t without --log-dir write into a fresh temporary log directory.
    config.logs.dir = freshDirectory(temp / "ddprun_logs_XXXXXX", temp.string(), "give --log-dir");
    spdlog::warn("--redirects/--tee without --log-dir: the workers' log files go under {}",
                 config.logs.dir);
  } else if (!config.logs.dir.empty()) {
    std::error_code ignored;  // a directory that cannot be made fails at mkdtemp below, named
    // Absolute: the workers get paths in it (their error files) and may change directory.
    config.logs.dir = fs::absolute(config.logs.dir, ignored).lexically_normal().string();
    fs::create_directories(config.logs.dir, ignored);
    checkLogDirectory(config.logs.dir);
  }
  // Each directory is registered with the guardian as soon as it exists: all of them are removed
  // if the agent is killed, even with kill -9.
  if (config.logs.dir.empty()) {
    scratchDir_ =
        freshDirectory(temp / fmt::format("ddprun-{}-XXXXXX", ::getpid()), temp.string(), tempFix);
    if (guardian) guardian->removeOnDeath(scratchDir_);
  } else {
    logRunDir_ = freshDirectory(fs::path(config.logs.dir) / (config.rdzv.runId + "_XXXXXX"),
                                "--log-dir " + config.logs.dir, "give a writable --log-dir");
    spdlog::info("logs of this run: {}", logRunDir_);
  }
  try {
    privateDir_ = freshDirectory(temp / "ddprun-agent-XXXXXX", temp.string(), tempFix);
  } catch (...) {
    removeQuietly(scratchDir_);
    throw;
  }
  if (guardian) guardian->removeOnDeath(privateDir_);
}

RunDirectories::~RunDirectories() {
  // The two trees side by side: most of a removal is the file system's (on ext4 the last close
  // of each removed directory frees its inode and block, and may wait on the journal), so the
  // two overlap on a second core where the agent's exit would otherwise wait for one after the
  // other.
  std::thread scratch;
  if (!keepScratch_ && !scratchDir_.empty()) {
    try {
      scratch = std::thread([this] { removeQuietly(scratchDir_); });
    } catch (const std::system_error&) {
      removeQuietly(scratchDir_);  // no thread to be had: one after the other
    }
  }
  removeQuietly(privateDir_);
  if (scratch.joinable()) scratch.join();
}

}  // namespace ddprun::launcher
