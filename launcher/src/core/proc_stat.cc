#include "core/proc_stat.h"

#include <charconv>

#include "core/file_text.h"

namespace ddprun::launcher {
namespace {

// A stat line is one short line; a longer read means something else is there.
constexpr std::size_t kStatLimit = 4096;

}  // namespace

std::optional<ProcStat> parseProcStat(std::string_view text) {
  const auto close = text.rfind(')');
  // ") S P": the state two characters after the ')', the parent from the fourth on.
  if (close == std::string_view::npos || close + 4 > text.size() || text[close + 1] != ' ' ||
      text[close + 3] != ' ') {
    return std::nullopt;
  }
  ProcStat stat;
  stat.state = text[close + 2];
  const std::string_view rest = text.substr(close + 4);
  long parent = -1;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), parent);
  if (error != std::errc() || end == rest.data()) return std::nullopt;
  stat.parent = static_cast<pid_t>(parent);
  return stat;
}

std::optional<ProcStat> readProcStat(const std::string& path) {
  const auto text = readFileText(path, nullptr, kStatLimit);
  if (!text) return std::nullopt;
  return parseProcStat(*text);
}

std::optional<ProcStat> readProcStat(pid_t pid) {
  return readProcStat("/proc/" + std::to_string(pid) + "/stat");
}

}  // namespace ddprun::launcher
