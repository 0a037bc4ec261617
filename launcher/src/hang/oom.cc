#include "hang/oom.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "core/file_text.h"

namespace ddprun::launcher {
namespace {

// memory.events and /proc/vmstat are a few hundred bytes; a bound keeps an odd file from costing
// more.
constexpr std::size_t kCounterFileLimit = 64 * 1024;
std::string readText(const std::string& path) {
  return readFileText(path, nullptr, kCounterFileLimit).value_or("");
}

// Every record of the kernel log still in its ring buffer. /dev/kmsg hands out one record per
// read() and fails a read whose buffer is too small for it, hence the generous buffer.
std::string readKernelLog(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  std::string records;
  char buffer[8192];
  for (int i = 0; i < 100000; ++i) {  // bounded: the ring buffer holds far fewer
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      records.append(buffer, static_cast<std::size_t>(n));
      if (records.back() != '\n') records += '\n';
    } else if (n < 0 && errno == EPIPE) {
      continue;  // records were overwritten while reading: go on with the next
    } else {
      break;  // EAGAIN: the end; a plain file (tests): EOF
    }
  }
  ::close(fd);
  return records;
}

}  // namespace

std::optional<std::uint64_t> oomKillCount(const std::string& text) {
  std::istringstream lines(text);
  std::string key;
  std::uint64_t value = 0;
  while (lines >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

std::string oomKillRecord(const std::string& records, pid_t pid) {
  // "Out of memory: Killed process 1234 (python3) total-vm:..." and, in a memory cgroup,
  // "Memory cgroup out of memory: Killed process 1234 (python3) ...".
  const std::string needle = fmt::format("Killed process {} (", pid);
  std::istringstream lines(records);
  std::string line;
  std::string found;
  while (std::getline(lines, line)) {
    const auto text = line.find(';');
    if (line.find(needle) == std::string::npos) continue;
    found = text == std::string::npos ? line : line.substr(text + 1);
  }
  return found;  // the last one: a pid may have been reused since an earlier kill
}

KernelOomWitness::KernelOomWitness(std::string cgroupPath, std::string kernelLog,
                                   std::string vmstat)
    : cgroupPath_(std::move(cgroupPath)),
      kernelLog_(std::move(kernelLog)),
      vmstat_(std::move(vmstat)) {}

std::optional<std::uint64_t> KernelOomWitness::cgroupCount() const {
  if (cgroupPath_.empty()) return std::nullopt;
  return oomKillCount(readText(cgroupPath_ + "/memory.events"));
}

std::optional<std::uint64_t> KernelOomWitness::hostCount() const {
  return oomKillCount(readText(vmstat_));
}

void KernelOomWitness::attemptStarted() {
  cgroupAtStart_ = cgroupCount();
  hostAtStart_ = hostCount();
}

std::string KernelOomWitness::explain(pid_t pid) {
  std::string how;
  if (const std::string record = oomKillRecord(readKernelLog(kernelLog_), pid); !record.empty()) {
    how = fmt::format("killed by the kernel's OOM killer (kernel log: \"{}\")", record);
  } else if (const auto inCgroup = cgroupCount();
             inCgroup && cgroupAtStart_ && *inCgroup > *cgroupAtStart_) {
    how = fmt::format(
        "killed by the kernel's OOM killer (the worker cgroup's memory.events "
        "oom_kill went from {} to {})",
        *cgroupAtStart_, *inCgroup);
  } else if (const auto onHost = hostCount(); onHost && hostAtStart_ && *onHost > *hostAtStart_) {
    how = fmt::format(
        "most likely killed by the kernel's OOM killer (a SIGKILL ddprun did not "
        "send, while /proc/vmstat oom_kill went from {} to {})",
        *hostAtStart_, *onHost);
  }
  if (how.empty()) return how;
  // Counted once: the next worker killed needs a new kill to be blamed on memory.
  attemptStarted();
  return how + ": the worker ran out of memory; give it more or make it use less";
}

}  // namespace ddprun::launcher
