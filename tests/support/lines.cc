#include "lines.h"

#include <iterator>
#include <regex>
#include <sstream>

namespace ddprun::test {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

int countLines(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  int n = 0;
  for (const auto& line : lines(text)) n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

std::optional<std::string> findLine(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  for (auto& line : lines(text)) {
    if (std::regex_search(line, re)) return line;
  }
  return std::nullopt;
}

int countMatches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace ddprun::test
