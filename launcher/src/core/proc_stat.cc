#include "core/proc_stat.h"

#include <dirent.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "core/file_text.h"

namespace ddprun::launcher {
namespace {

// A stat line is one short line; a longer read means something else is there.
constexpr std::size_t kStatLimit = 4096;
// /proc/<pid>/io is seven short lines.
constexpr std::size_t kIoLimit = 1024;

// The next space-separated number of `rest`, consumed; nothing when there is none.
template <typename Number>
std::optional<Number> nextNumber(std::string_view& rest) {
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  Number value{};
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (error != std::errc() || end == rest.data()) return std::nullopt;
  rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
  return value;
}

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
  std::string_view rest = text.substr(close + 4);
  // Fields 4 (ppid) to 22 (starttime) of proc(5), in order; the counters between them that the
  // agent does not use are read and dropped.
  const auto parent = nextNumber<long>(rest);
  if (!parent) return std::nullopt;
  stat.parent = static_cast<pid_t>(*parent);
  // A kernel older than these fields (none that ddprun runs on) leaves them at their defaults.
  std::array<long long, 18> fields{};  // 5 pgrp ... 22 starttime
  std::size_t read = 0;
  for (; read < fields.size(); ++read) {
    const auto value = nextNumber<long long>(rest);
    if (!value) break;
    fields[read] = *value;
  }
  auto field = [&](int number) { return fields[static_cast<std::size_t>(number - 5)]; };
  auto ticks = [&](int number) { return static_cast<std::uint64_t>(std::max(0LL, field(number))); };
  if (read >= 2) {
    stat.processGroup = static_cast<pid_t>(field(5));
    stat.session = static_cast<pid_t>(field(6));
  }
  if (read == fields.size()) {
    stat.userTicks = ticks(14);
    stat.systemTicks = ticks(15);
    stat.childUserTicks = ticks(16);
    stat.childSystemTicks = ticks(17);
    stat.startTicks = ticks(22);
  }
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

std::optional<ProcIo> parseProcIo(std::string_view text) {
  ProcIo io;
  bool readChars = false;
  bool writtenChars = false;
  while (!text.empty()) {
    const auto newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view rest = line.substr(colon + 1);
    const auto value = nextNumber<std::uint64_t>(rest);
    if (!value) continue;
    if (name == "rchar") {
      io.readChars = *value;
      readChars = true;
    } else if (name == "wchar") {
      io.writtenChars = *value;
      writtenChars = true;
    } else if (name == "read_bytes") {
      io.readBytes = *value;
    } else if (name == "write_bytes") {
      io.writtenBytes = *value;
    }
  }
  if (!readChars || !writtenChars) return std::nullopt;
  return io;
}

std::optional<ProcIo> readProcIo(pid_t pid) {
  const auto text = readFileText("/proc/" + std::to_string(pid) + "/io", nullptr, kIoLimit);
  if (!text) return std::nullopt;
  return parseProcIo(*text);
}

std::vector<pid_t> listProcesses() {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return pids;
}

std::optional<std::vector<pid_t>> childrenOf(pid_t pid) {
  const std::string tasksPath = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = ::opendir(tasksPath.c_str());
  if (tasks == nullptr) return std::nullopt;
  std::vector<pid_t> children;
  bool listed = false;
  while (const dirent* task = ::readdir(tasks)) {
    if (task->d_name[0] < '0' || task->d_name[0] > '9') continue;
    constexpr std::size_t kListLimit = 1u << 20;  // ~150,000 children: bounded, never reached
    const auto text =
        readFileText(tasksPath + "/" + task->d_name + "/children", nullptr, kListLimit);
    if (!text) continue;  // a thread that ended meanwhile, or no such file
    listed = true;
    std::istringstream in(*text);
    for (long child; in >> child;) children.push_back(static_cast<pid_t>(child));
  }
  ::closedir(tasks);
  if (!listed) return std::nullopt;
  return children;
}

std::optional<std::vector<pid_t>> descendantsOf(pid_t root, std::size_t limit) {
  auto found = childrenOf(root);
  if (!found) return std::nullopt;
  // Breadth first over the list itself: entries [0, next) have been asked for their children.
  for (std::size_t next = 0; next < found->size() && found->size() < limit; ++next) {
    const auto children = childrenOf((*found)[next]);
    if (!children) continue;  // gone meanwhile
    found->insert(found->end(), children->begin(), children->end());
  }
  if (found->size() > limit) found->resize(limit);
  return found;
}

}  // namespace ddprun::launcher
