#include "waits.h"

#include <fmt/format.h>

#include "lines.h"

namespace ddprun::test {

std::optional<int> exitStatus(Subprocess& process, std::chrono::milliseconds timeout) {
  const auto status = process.wait(timeout);
  if (!status) {
    UNSCOPED_INFO(
        fmt::format("still running after {} ms:\n{}", timeout.count(), describeAll({&process})));
  }
  return status;
}

bool reported(const std::vector<Subprocess*>& nodes, const std::string& pattern, int count,
              std::chrono::milliseconds timeout) {
  return eventually(
      [&] {
        std::string all;
        for (Subprocess* node : nodes) all += node->output();
        return countLines(all, pattern) == count;
      },
      timeout, nodes);
}

bool exitsWith(Subprocess& process, int expected, std::chrono::milliseconds timeout,
               const std::vector<Subprocess*>& others) {
  const auto status = process.wait(timeout);
  if (status == expected) return true;
  std::vector<Subprocess*> all{&process};
  all.insert(all.end(), others.begin(), others.end());
  UNSCOPED_INFO(fmt::format("expected exit status {} within {} ms, saw {}:\n{}", expected,
                            timeout.count(), status ? std::to_string(*status) : "none (running)",
                            describeAll(all)));
  return false;
}

int listeningPort(Subprocess& server, std::chrono::milliseconds timeout) {
  const auto line = server.readLine(timeout);
  const int port = line ? portFromListeningLine(*line) : 0;
  if (port == 0) {
    UNSCOPED_INFO(
        fmt::format("no \"listening on HOST:PORT\" line within {} ms (first line: {}):\n{}",
                    timeout.count(), line ? "'" + *line + "'" : "none", describeAll({&server})));
  }
  return port;
}

}  // namespace ddprun::test
