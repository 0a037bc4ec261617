// The regular expression engines a line pattern could use (docs/benchmarks.md, "Patterns on the
// output path"): std::regex (ECMAScript, optimize, nosubs) against glibc's POSIX regexec
// (REG_EXTENDED | REG_NOSUB, REG_STARTEND: the line where it lies, no copy), searching 100,000
// training-log lines for the three patterns of the benchmark. Prints microseconds per line.
//
//   ddprun-regex-engines [LINES]
#include <regex.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 100000;
  std::vector<std::string> lines;
  lines.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    lines.push_back("step " + std::to_string(i) +
                    " loss 2.3456 lr 0.0001 grad_norm 1.23 time 0.123s tokens/s 123456");
  }
  using Clock = std::chrono::steady_clock;
  const auto perLine = [&](Clock::duration took) {
    return std::chrono::duration<double, std::micro>(took).count() / static_cast<double>(count);
  };
  for (const char* pattern : {"^step [0-9]+", "training started", "loss (nan|inf)"}) {
    const std::regex ecma(pattern,
                          std::regex::ECMAScript | std::regex::optimize | std::regex::nosubs);
    const auto t0 = Clock::now();
    long stdMatches = 0;
    for (const std::string& line : lines)
      stdMatches += std::regex_search(line.data(), line.data() + line.size(), ecma) ? 1 : 0;
    const auto t1 = Clock::now();
    regex_t posix;
    if (::regcomp(&posix, pattern, REG_EXTENDED | REG_NOSUB) != 0) return 1;
    long posixMatches = 0;
    for (const std::string& line : lines) {
      regmatch_t range{0, static_cast<regoff_t>(line.size())};
      posixMatches += ::regexec(&posix, line.data(), 1, &range, REG_STARTEND) == 0 ? 1 : 0;
    }
    const auto t2 = Clock::now();
    ::regfree(&posix);
    std::printf("%-18s std::regex %.3f us/line (%ld matches)   regexec %.3f us/line (%ld)\n",
                pattern, perLine(t1 - t0), stdMatches, perLine(t2 - t1), posixMatches);
  }
  return 0;
}
