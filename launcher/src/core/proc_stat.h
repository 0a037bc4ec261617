// /proc/<pid>/stat (and /proc/<pid>/task/<tid>/stat) and /proc/<pid>/io read and parsed in one
// place: the agent asks them for a process's state (is a hung worker stopped? is a thread in D?),
// its parent (which strays belong to a worker's tree), its session (which processes are a
// worker's) and the work it has done (CPU time, I/O: is a straggler idle or busy?).
//
// Thread safety: pure functions over the file system.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

struct ProcStat {
  char state = '?';  // R, S, D, T, t, Z, ...
  pid_t parent = -1;
  pid_t processGroup = -1;
  pid_t session = -1;
  // CPU time in clock ticks (sysconf(_SC_CLK_TCK)): its own threads', and that of the children
  // it has waited for (so a child's work does not vanish from the tree when it is reaped).
  std::uint64_t userTicks = 0;
  std::uint64_t systemTicks = 0;
  std::uint64_t childUserTicks = 0;
  std::uint64_t childSystemTicks = 0;
  // When it started, in clock ticks after boot: with the pid, who it is (a pid may be reused).
  std::uint64_t startTicks = 0;
};

// Parses "pid (comm) S ppid pgrp session ... utime stime cutime cstime ... starttime ...". comm
// may hold spaces and parentheses, so the fields after it are found after the LAST ')'. Nothing
// for text that is not of this form.
std::optional<ProcStat> parseProcStat(std::string_view text);

// The stat file at `path` ("/proc/<pid>/stat", "/proc/<pid>/task/<tid>/stat"), or nothing when it
// cannot be read (the process is gone) or parsed.
std::optional<ProcStat> readProcStat(const std::string& path);
std::optional<ProcStat> readProcStat(pid_t pid);

// /proc/<pid>/io: the bytes a process moved through read/write calls (rchar, wchar: files,
// pipes, terminals) and to or from storage (read_bytes, write_bytes: page-cache I/O, mmap
// writes included).
struct ProcIo {
  std::uint64_t readChars = 0;
  std::uint64_t writtenChars = 0;
  std::uint64_t readBytes = 0;
  std::uint64_t writtenBytes = 0;
};

// Parses the "name: value" lines; nothing when rchar or wchar is missing.
std::optional<ProcIo> parseProcIo(std::string_view text);
// Nothing when it cannot be read: the process is gone, or it may not be inspected (the file
// needs ptrace access: another user's, a non-dumpable process).
std::optional<ProcIo> readProcIo(pid_t pid);

// The pids in /proc now (processes, not threads); empty when /proc cannot be read.
std::vector<pid_t> listProcesses();

// The children of `pid` as the kernel lists them per thread (/proc/<pid>/task/<tid>/children,
// CONFIG_PROC_CHILDREN): one small read per thread, where finding them by parent reads the stat
// file of every process on the machine (over a thousand system calls on a quiet one). nullopt
// where the kernel keeps no such list (or `pid` is gone). The kernel documents the list as exact
// only while the children do not fork or exit meanwhile: a child that forks at that moment may
// be missed once.
std::optional<std::vector<pid_t>> childrenOf(pid_t pid);

// `root`'s descendants (children first, then theirs), found through childrenOf: what the agent,
// a subreaper to which every orphan of its workers comes back, has below it; the job's size,
// not the machine's. At most `limit` of them (a bound, never reached by a job). nullopt where
// the kernel keeps no children lists.
std::optional<std::vector<pid_t>> descendantsOf(pid_t root, std::size_t limit = 1u << 16);

}  // namespace ddprun::launcher
