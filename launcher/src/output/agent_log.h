// The agent's own log lines (spdlog) on its console: queued on the same ConsoleWriter as the
// workers' lines, so the event loop never waits on a stalled stderr for its own logging either.
//
// Thread safety: spdlog's (the sink locks); the writer is thread-safe for write().
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

#include "output/console_writer.h"

namespace ddprun::launcher {

// How the agent's log lines look (spdlog's pattern).
inline constexpr const char* kLogPattern = "[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%l] %v";

// For its lifetime, the default logger's lines go to `writer` (in the agent's log pattern); the
// sinks it had come back afterwards.
class LogThroughConsole {
 public:
  explicit LogThroughConsole(std::shared_ptr<ConsoleWriter> writer);
  ~LogThroughConsole();
  LogThroughConsole(const LogThroughConsole&) = delete;
  LogThroughConsole& operator=(const LogThroughConsole&) = delete;

 private:
  std::shared_ptr<spdlog::logger> logger_;
  std::vector<spdlog::sink_ptr> saved_;
};

}  // namespace ddprun::launcher
