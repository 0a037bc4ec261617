#include "hang/flight_recorder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "ddprun/common/safe_files.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A variable's value when it is set to something; "" counts as unset, as torch takes it.
std::optional<std::string> valueOf(const std::map<std::string, std::string>& environment,
                                   const char* name) {
  const auto it = environment.find(name);
  if (it == environment.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

long long elapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - since).count();
}

// What is at a path, as lstat sees it: enough to tell a new or rewritten file from the old one.
struct FileState {
  bool exists = false;
  bool regular = false;
  ino_t inode = 0;
  off_t size = 0;
  struct timespec modified {};

  bool operator==(const FileState& other) const {
    return exists == other.exists && regular == other.regular && inode == other.inode &&
           size == other.size && modified.tv_sec == other.modified.tv_sec &&
           modified.tv_nsec == other.modified.tv_nsec;
  }
};

FileState fileState(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return {};
  return FileState{true, S_ISREG(info.st_mode), info.st_ino, info.st_size, info.st_mtim};
}

std::string errorText(int error) { return std::strerror(error); }

// Writes the byte that asks for a dump; false (with a note) when it was not written.
bool requestDump(const std::string& pipe, pid_t pid, FlightRecorderDump& result) {
  struct stat process {};
  if (::stat(fmt::format("/proc/{}", pid).c_str(), &process) != 0) {
    result.notes.push_back(fmt::format(
        "Flight Recorder: not asked (cannot tell whose process {} is: {})", pid, errorText(errno)));
    return false;
  }
  // Never blocks: without a reader the open fails (ENXIO) instead of waiting for one.
  common::FileDescriptor fd(::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int error = errno;
    if (error == ENXIO) {
      result.notes.push_back(
          fmt::format("no Flight Recorder reader on {} (is the process group NCCL?)", pipe));
    } else if (error == ENOENT) {
      result.notes.push_back(fmt::format(
          "no Flight Recorder pipe at {} (the worker made no NCCL process group yet, or its torch "
          "has no dump pipe)",
          pipe));
    } else if (error == ELOOP) {
      result.notes.push_back(
          fmt::format("Flight Recorder: {} is a symbolic link: not written", pipe));
    } else {
      result.notes.push_back(
          fmt::format("Flight Recorder: cannot open {}: {}", pipe, errorText(error)));
    }
    return false;
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISFIFO(info.st_mode)) {
    result.notes.push_back(fmt::format("Flight Recorder: {} is not a FIFO: not written", pipe));
    return false;
  }
  if (info.st_uid != process.st_uid) {
    result.notes.push_back(
        fmt::format("Flight Recorder: {} belongs to {}, not to the worker's {}: not written", pipe,
                    common::userText(info.st_uid), common::userText(process.st_uid)));
    return false;
  }
  const char request = '1';
  ssize_t wrote = -1;
  do {
    wrote = ::write(fd.get(), &request, 1);
  } while (wrote < 0 && errno == EINTR);
  // EAGAIN: the pipe is full of requests the reader has not taken yet; one more changes nothing.
  if (wrote != 1 && errno != EAGAIN) {
    result.notes.push_back(
        fmt::format("Flight Recorder: cannot write to {}: {}", pipe, errorText(errno)));
    return false;
  }
  return true;
}

}  // namespace

bool flightRecorderEnabled(const std::map<std::string, std::string>& environment) {
  auto size = valueOf(environment, common::kEnvTorchFrBufferSize);
  if (!size) size = valueOf(environment, common::kEnvTorchNcclTraceBufferSize);
  if (!size) return false;
  long long entries = 0;
  const char* end = size->data() + size->size();
  const auto [rest, error] = std::from_chars(size->data(), end, entries);
  return error == std::errc() && rest == end && entries > 0;
}

std::optional<FlightRecorderPlan> flightRecorderPlan(
    const std::map<std::string, std::string>& environment, int rank, const std::string& pipePrefix,
    const std::string& dumpPrefix) {
  if (!flightRecorderEnabled(environment)) return std::nullopt;
  FlightRecorderPlan plan;
  std::string pipe = valueOf(environment, common::kEnvTorchNcclDebugInfoPipeFile).value_or("");
  if (pipe.empty()) {
    if (pipePrefix.empty()) return std::nullopt;
    pipe = pipePrefix;
    plan.set[common::kEnvTorchNcclDebugInfoPipeFile] = pipePrefix;
  }
  // The name torch reads first wins; the agent sets the old one, which every release reads.
  std::string dump =
      valueOf(environment, common::kEnvTorchFrDumpTempFile)
          .value_or(valueOf(environment, common::kEnvTorchNcclDebugInfoTempFile).value_or(""));
  if (dump.empty()) {
    if (dumpPrefix.empty()) return std::nullopt;
    dump = dumpPrefix;
    plan.set[common::kEnvTorchNcclDebugInfoTempFile] = dumpPrefix;
  }
  plan.target.pipe = fmt::format("{}{}.pipe", pipe, rank);
  plan.target.dump = fmt::format("{}{}", dump, rank);
  return plan;
}

FlightRecorderDump triggerFlightRecorder(const FlightRecorderTarget& target, pid_t pid,
                                         std::chrono::milliseconds budget) {
  // Quiet for this long after growing: the dump is one ofstream write of the whole pickle.
  constexpr auto kQuiet = milliseconds(100);
  FlightRecorderDump result;
  result.pipe = target.pipe;
  try {
    const auto start = Clock::now();
    const FileState before = fileState(target.dump);
    result.written = requestDump(target.pipe, pid, result);
    if (!result.written) return result;
    FileState last = before;
    auto lastChange = start;
    bool appeared = false;
    for (;;) {
      std::this_thread::sleep_for(milliseconds(10));
      const auto now = Clock::now();
      const FileState state = fileState(target.dump);
      if (!(state == last)) {
        last = state;
        lastChange = now;
        appeared = state.exists && state.regular;
      }
      if (appeared && now - lastChange >= kQuiet) {
        result.settled = true;
        break;
      }
      if (now - start >= budget) break;
    }
    if (!appeared) {
      result.notes.push_back(fmt::format(
          "Flight Recorder: asked through {}, but no dump in {} within {} ms (torch reads the "
          "pipe every TORCH_NCCL_COORD_CHECK_MILSEC with TORCH_NCCL_DUMP_ON_TIMEOUT on)",
          target.pipe, target.dump, elapsedMs(start)));
      return result;
    }
    result.file = target.dump;
    if (!result.settled) {
      result.notes.push_back(fmt::format(
          "Flight Recorder: {} was still growing after {} ms; the dump may be incomplete",
          target.dump, elapsedMs(start)));
    }
  } catch (const std::exception& error) {
    result.notes.push_back(fmt::format("Flight Recorder: {}", error.what()));
  }
  return result;
}

std::vector<std::string> flightRecorderSummary(const FlightRecorderDump& dump) {
  std::vector<std::string> lines;
  if (!dump.file.empty()) lines.push_back(fmt::format("Flight Recorder dump: {}", dump.file));
  lines.insert(lines.end(), dump.notes.begin(), dump.notes.end());
  return lines;
}

}  // namespace ddprun::launcher
