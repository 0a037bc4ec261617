// Marks every descriptor from 3 up close-on-exec, so that nothing of this process's (store
// sockets, the job's pipes) reaches the program exec'd next; a leaked descriptor would keep a
// connection or a pipe open after its owner closed it. Async-signal-safe: for a child between
// fork/clone and exec (the worker's start, `ddprun detach`).
#pragma once

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddprun::launcher {

inline void closeOnExecFrom3() {
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {  // before Linux 5.11
    const long limit = ::sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < limit; ++fd) ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  }
}

}  // namespace ddprun::launcher
