// /proc/<pid>/stat (and /proc/<pid>/task/<tid>/stat) read and parsed in one place: the agent asks
// it for a process's state (is a hung worker stopped? is a thread in D?) and its parent (which
// strays belong to a worker's tree).
//
// Thread safety: pure functions over the file system.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

struct ProcStat {
  char state = '?';  // R, S, D, T, t, Z, ...
  pid_t parent = -1;
};

// Parses "pid (comm) S ppid ...". comm may hold spaces and parentheses, so the fields after it
// are found after the LAST ')'. Nothing for text that is not of this form.
std::optional<ProcStat> parseProcStat(std::string_view text);

// The stat file at `path` ("/proc/<pid>/stat", "/proc/<pid>/task/<tid>/stat"), or nothing when it
// cannot be read (the process is gone) or parsed.
std::optional<ProcStat> readProcStat(const std::string& path);
std::optional<ProcStat> readProcStat(pid_t pid);

}  // namespace ddprun::launcher
