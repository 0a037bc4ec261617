#include "cli/torch_version.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <vector>

#include "core/child_start.h"

namespace ddprun::launcher::cli_detail {
namespace {

// Prints torch's __version__ from its version.py, found by the import system without running the
// package's __init__ (which would load libtorch); prints nothing when there is no torch.
constexpr const char* kProbe =
    "import importlib.util, os, re\n"
    "spec = importlib.util.find_spec('torch')\n"
    "if spec and spec.submodule_search_locations:\n"
    "    path = os.path.join(list(spec.submodule_search_locations)[0], 'version.py')\n"
    "    text = open(path).read(65536) if os.path.isfile(path) else ''\n"
    "    found = re.search(r\"__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", text)\n"
    "    print(found.group(1) if found else '')\n";

constexpr std::size_t kMaxOutput = 4096;

}  // namespace

std::optional<std::string> torchVersionOf(const std::string& python,
                                          const Environment& environment,
                                          std::chrono::milliseconds timeout) {
  int output[2];
  if (::pipe2(output, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<std::string> words = {python, "-c", kProbe};
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<std::string> entries;
  for (const auto& [name, value] : environment) entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  ChildSteps steps;
  steps.group = ChildSteps::Group::kNewGroup;  // its whole group goes at the timeout
  steps.stdoutFd = output[1];
  const SpawnedChild child = spawnChild(steps, python.c_str(), argv.data(), envp.data());
  ::close(output[1]);
  std::string text;
  if (child.pid > 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[512];
    while (text.size() < kMaxOutput) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd ready{output[0], POLLIN, 0};
      if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t got = ::read(output[0], buffer, sizeof buffer);
      if (got <= 0) break;  // EOF: the probe is done
      text.append(buffer, static_cast<std::size_t>(got));
    }
    ::kill(-child.pid, SIGKILL);  // nothing of it outlives the probe (a no-op once it exited)
    int status = 0;
    ::waitpid(child.pid, &status, 0);
  }
  ::close(output[0]);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const bool plain = !text.empty() && text.size() <= 64 && [&] {
    for (char c : text) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-' &&
          c != '_')
        return false;
    }
    return true;
  }();
  if (!plain) return std::nullopt;
  return text;
}

std::optional<int> torchMajor(const std::string& version) {
  int major = 0;
  std::size_t i = 0;
  for (; i < version.size() && std::isdigit(static_cast<unsigned char>(version[i])); ++i) {
    if (i >= 4) return std::nullopt;
    major = major * 10 + (version[i] - '0');
  }
  if (i == 0 || (i < version.size() && version[i] != '.')) return std::nullopt;
  return major;
}

}  // namespace ddprun::launcher::cli_detail
