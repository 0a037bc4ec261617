#include "cli/host_probes.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "cli/cli.h"
#include "core/cuda_visible_devices.h"
#include "core/file_text.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {

using common::printable;

bool pathExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool isDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string absolutePath(const std::string& path) {
  std::error_code error;
  const auto absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.string();
}

int cpuCount() {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0) return static_cast<int>(online);
  return std::max(1u, std::thread::hardware_concurrency());
}

int physicalNvidiaGpuCount() {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it(kNvidiaGpusDir, error), end; !error && it != end;
       it.increment(error)) {
    ++count;
  }
  return count;
}

int visibleNvidiaGpuCount(const Environment& environment) {
  std::optional<std::string> mask;
  if (const auto* value = lookup(environment, kCudaVisibleDevices)) mask = *value;
  return visibleGpuCount(physicalNvidiaGpuCount(), mask);
}

int visibleGpuCount(int physicalGpus, const std::optional<std::string>& cudaVisibleDevices) {
  return static_cast<int>(visibleDevices(cudaVisibleDevices, physicalGpus).size());
}

int visibleIntelGpuCount(const Environment& environment) {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it("/sys/class/drm", error), end; !error && it != end;
       it.increment(error)) {
    if (!it->path().filename().string().starts_with("renderD")) continue;
    const auto vendor = readFileText((it->path() / "device" / "vendor").string(), nullptr, 64);
    if (vendor && trim(*vendor) == "0x8086") ++count;
  }
  if (const auto* mask = lookup(environment, "ZE_AFFINITY_MASK");
      mask != nullptr && !mask->empty()) {
    int listed = 0;
    for (const auto entry : split(*mask, ',')) listed += trim(entry).empty() ? 0 : 1;
    count = std::min(count, listed);
  }
  return count;
}

namespace {

// getaddrinfo's status for `host`: an address literal without a lookup, else the name's.
int resolveStatus(std::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string name(host);
  addrinfo* result = nullptr;
  hints.ai_flags = AI_NUMERICHOST;
  int status = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (status != 0) {
    hints.ai_flags = 0;
    status = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  }
  if (result != nullptr) ::freeaddrinfo(result);
  return status;
}

}  // namespace

bool resolvesNow(std::string_view host) { return resolveStatus(host) == 0; }

void checkResolvable(std::string_view host, const GivenValue& source) {
  if (const int status = resolveStatus(host); status != 0) {
    throw UsageError(
        fmt::format("cannot resolve host {} in {} ({}); check the name or give an IP address",
                    quote(host), printable(source.origin), ::gai_strerror(status)));
  }
}

void warnIfUnresolved(std::string_view host, const GivenValue& source,
                      std::vector<std::string>& warnings) {
  if (resolvesNow(host)) return;
  warnings.push_back(fmt::format(
      "host {} in {} does not resolve yet; the agent waits for it up to the join timeout (a "
      "Kubernetes service name appears seconds after its pod): check the name if it never does",
      quote(host), printable(source.origin)));
}

namespace {

// An existing --log-dir: a directory ddprun may write in.
void checkExistingLogDir(const GivenValue& given) {
  const std::string& path = given.value;
  if (!isDirectory(path)) {
    throw UsageError(
        fmt::format("{} exists but is not a directory; give a directory (it is "
                    "created if missing)",
                    label(given)));
  }
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    throw UsageError(fmt::format(
        "{} is not writable; fix its permissions or choose another directory", label(given)));
  }
}

}  // namespace

void checkLogDir(const GivenValue& given) {
  if (given.value.empty()) return;
  const std::string& path = given.value;
  if (pathExists(path)) return checkExistingLogDir(given);
  std::filesystem::path ancestor = std::filesystem::absolute(path).parent_path();
  while (!pathExists(ancestor.string()) && ancestor.has_relative_path()) {
    ancestor = ancestor.parent_path();
  }
  // Only trying tells whether a directory can be made there (root passes access() even in
  // /proc): make one and remove it, so that parsing leaves nothing behind.
  std::string probe = (ancestor / ".ddprun-log-dir-XXXXXX").string();
  if (!isDirectory(ancestor.string()) || ::mkdtemp(probe.data()) == nullptr) {
    throw UsageError(
        fmt::format("{} cannot be created: {} is not a writable directory; choose "
                    "another --log-dir",
                    label(given), quote(ancestor.string())));
  }
  ::rmdir(probe.c_str());
}

}  // namespace ddprun::launcher::cli_detail
