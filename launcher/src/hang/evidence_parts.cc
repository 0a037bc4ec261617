#include "hang/evidence_parts.h"

#include <cctype>
#include <cstring>
#include <sstream>

#include "core/file_text.h"
#include "core/proc_stat.h"

namespace ddprun::launcher::evidence {

namespace {

constexpr std::size_t kProcFileLimit = 1u << 20;

}  // namespace

std::string errorText(int error) { return std::strerror(error); }

long long elapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

std::optional<std::string> readSmallFile(const std::string& path, std::string* why) {
  return readFileText(path, why, kProcFileLimit);
}

std::string trimmed(std::string text) {
  const auto isSpace = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && isSpace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && isSpace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  std::string line;
  while (std::getline(stream, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

char processState(pid_t pid) {
  const auto stat = readProcStat(pid);
  return stat ? stat->state : '?';
}

bool isStopped(char state) { return state == 'T' || state == 't'; }

}  // namespace ddprun::launcher::evidence
