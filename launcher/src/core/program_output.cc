#include "core/program_output.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>

#include "core/child_start.h"

namespace ddprun::launcher {

std::optional<std::string> programOutput(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& environment,
                                         std::chrono::milliseconds timeout, std::size_t maxBytes) {
  if (argv.empty()) return std::nullopt;
  int output[2];
  if (::pipe2(output, O_CLOEXEC) != 0) return std::nullopt;
  std::vector<std::string> words = argv;
  std::vector<char*> args;
  for (std::string& word : words) args.push_back(word.data());
  args.push_back(nullptr);
  std::vector<std::string> entries;
  for (const auto& [name, value] : environment) entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  ChildSteps steps;
  steps.group = ChildSteps::Group::kNewGroup;  // its whole group goes at the timeout
  steps.stdoutFd = output[1];
  const SpawnedChild child = spawnChild(steps, words.front().c_str(), args.data(), envp.data());
  ::close(output[1]);
  std::string text;
  if (child.pid > 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[512];
    while (text.size() < maxBytes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd ready{output[0], POLLIN, 0};
      if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t got = ::read(output[0], buffer, sizeof buffer);
      if (got <= 0) break;  // EOF: the program is done writing
      text.append(buffer, static_cast<std::size_t>(got));
    }
    ::kill(-child.pid, SIGKILL);  // nothing of it outlives the call (a no-op once it exited)
    int status = 0;
    ::waitpid(child.pid, &status, 0);
  }
  ::close(output[0]);
  if (text.size() > maxBytes) text.resize(maxBytes);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) return std::nullopt;
  return text;
}

}  // namespace ddprun::launcher
