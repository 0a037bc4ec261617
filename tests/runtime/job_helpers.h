// What the runtime tests share about the jobs they run under ddprun: the command line, matching
// the output, and the checksum resilience_worker prints. Needs DDPRUN_BIN defined by the target.
#pragma once

#include <iterator>
#include <regex>
#include <string>
#include <vector>

namespace ddprun::test {

// `ddprun --standalone --nproc-per-node N rest...`
inline std::vector<std::string> ddprunCommand(int nproc, const std::vector<std::string>& rest) {
  std::vector<std::string> argv{DDPRUN_BIN, "--standalone", "--nproc-per-node",
                                std::to_string(nproc)};
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

inline int countMatches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                                        std::sregex_iterator()));
}

// What resilience_worker's rank 0 prints as "checksum": the sum over iterations of the
// all-reduced value (world * it + world * (world - 1) / 2).
inline long long expectedChecksum(int world, int iterations) {
  long long sum = 0;
  for (int it = 0; it < iterations; ++it) sum += world * it + world * (world - 1) / 2;
  return sum;
}

}  // namespace ddprun::test
