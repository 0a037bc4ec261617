// LogRouter: where each worker's stdout and stderr go (torchrun-contract §3.9).
//
//   worker stdout ──pipe──> reader ──whole lines, prefixed──> agent stdout   (console)
//                                  ├─raw bytes─────────────> <attempt>/<lr>/stdout.log   (-t)
//                                  └─matching lines────────> <attempt>/<lr>/filtered_stdout.log
//   worker stderr ── the same, to the agent's stderr and stderr.log / filtered_stderr.log
//
// Per stream and local rank, with D = log files wanted (prepare's logFiles) and the settings
// -r/--redirects (R), -t/--tee (T), --local-ranks-filter (C: the rank may reach the console) and
// the duplicate filters for that stream (F: non-empty):
//   file      = D && (R || T)
//   console   = C && (T || !R || !D)     (redirect without a log dir falls back to the console)
//   filtered  = D && F
//   file only (no console, no filters): the child writes to the file itself (no pipe);
//   nothing at all: the child writes to /dev/null; otherwise: a pipe read on the io_context (a
//   pseudo-terminal for stdout bound for a terminal console: terminalStdout).
// <attempt>/<local_rank>/ is created whenever an attempt directory is given (it is also where the
// worker's error.json goes); log files only with D. Files are opened for appending and
// never truncated, so an attempt directory reused by a later round keeps the earlier output.
//
// One channel for both streams: when a rank's stdout and stderr both go to the console only
// (console, no file, no filtered, for both; not passed through) and the console's stdout and
// stderr are one place (the same device and inode: one terminal, or `2>&1 | tee`), the worker
// gets ONE pipe (one pseudo-terminal on a terminal) as its fd 1 and fd 2, read as one stream and
// written to the agent's stdout. Its stdout and stderr lines then keep the order the worker wrote
// them in (the kernel's), as under torchrun, whose workers write straight to that one place; two
// channels read apart cannot tell which of two lines came first. The rank's "stderr tail" (the
// failure summary's `stderr :`) is then that channel's tail, stdout's lines among them. Where the
// streams go to different places, or one has a -r/-t file or filters, each keeps its own channel
// as above.
//
// Console output goes through a ConsoleWriter (console_writer.h), one per place (on one console
// both streams' lines go through the stdout writer), so the event loop never waits on the
// console. Whole lines go out as they arrive, one queued piece per batch. A line not ended yet
// (a progress bar drawn with '\r', a prompt) is held at most LogRouterOptions::partialLineDelay
// (kPartialLineDelay) and then written as it stands: a bar shows as it is drawn. The writer keeps
// workers' lines apart (console_lines.h): before another worker's text it ends an open line with
// '\n', the open worker's next text starts under its prefix again, and after each '\r' in a
// line the prefix is written again so a redrawn bar keeps it. No two workers' text ever shares a
// console line. A worker's pseudo-terminal is as wide as the console's less the prefix, so a bar
// sized to it does not wrap. When the writer's queue is full, the router stops reading the
// workers' pipes until it has room (back-pressure on the workers, nothing dropped). A line longer
// than kMaxLineBytes is cut into pieces of that size; a final line without '\n' gets one when
// the stream ends. A worker whose stream passes through (LogRouterOptions::passThrough) writes to
// the console itself. The agent should ignore SIGPIPE: a closed console then only loses output.
//
// Line patterns (LogRouterOptions::patterns, line_scan.h): every stream of every worker then
// passes through the router (no pass-through, a pipe even for a stream bound only for a file or
// for nowhere), and each whole line is matched where it lies in the read buffer; what a read's
// lines said goes to LogRouterOptions::lineEvents once the read is handled.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/line_scan.h"
#include "core/worker_output.h"
#include "ddprun/launcher/launch_config.h"
#include "output/console_writer.h"
#include "output/line_prefix.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace ddprun::launcher {

// A worker's partial line (no '\n' yet) reaches the console at most this long after it was
// written. tqdm redraws its bar at most every 0.1 s (its default mininterval), so each redraw
// shows about as it is drawn; a worker writing one line in several pieces within it still gets
// the line whole on the console.
inline constexpr std::chrono::milliseconds kPartialLineDelay{100};

struct LogRouterOptions {
  std::string role = "default";  // ${role_name}
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (nothing = "[${role_name}${local_rank}]:", "" = no
  // prefix). Substituted like Python's string.Template.safe_substitute: ${name} or $name, "$$" is
  // "$", unknown names stay. Names: role_name, local_rank, rank, and (ddprun extensions)
  // hostname, group_rank, attempt (the N of the attempt_N directory), and the fields of the
  // moment time and elapsed (line_prefix.h).
  std::optional<std::string> prefixTemplate;
  // When the agent started (${elapsed} counts from it).
  std::chrono::steady_clock::time_point startedAt = std::chrono::steady_clock::now();
  // The job's line patterns (nothing, or none in it: no line is matched) and where what they
  // find is told (required with patterns).
  std::shared_ptr<const LinePatterns> patterns;
  LineEvents* lineEvents = nullptr;
  // A stream bound only for the console (no -t/-r file, no filters, every rank allowed) goes
  // there untouched: the worker writes to the agent's own stdout/stderr, byte for byte and at
  // once, as under torchrun without --tee. The agent sets it for a job of one worker per node
  // with no prefix template given.
  bool passThrough = false;
  // The agent's stdout is a terminal: workers' stdout bound for the console gets a
  // pseudo-terminal instead of a pipe, so their output is line-buffered as on a terminal.
  bool terminalStdout = false;
  // How long a worker's line without '\n' is held before the console gets it as it stands.
  std::chrono::milliseconds partialLineDelay = kPartialLineDelay;
  std::string hostname;                             // ${hostname}
  StreamSelection redirects;                        // -r/--redirects
  StreamSelection tee;                              // -t/--tee
  std::optional<std::set<int>> localRanksFilter;    // --local-ranks-filter (nothing = all ranks)
  std::vector<std::string> duplicateStdoutFilters;  // --duplicate-stdout-filters (substrings)
  std::vector<std::string> duplicateStderrFilters;  // --duplicate-stderr-filters
  int consoleOut = 1;                               // where workers' stdout lines go (not owned)
  int consoleErr = 2;                               // where workers' stderr lines go (not owned)
  // The writers of those descriptors when the agent shares them (its own messages go there
  // too); made by the router when not given.
  std::shared_ptr<ConsoleWriter> outWriter;
  std::shared_ptr<ConsoleWriter> errWriter;
};

// The console prefix of one worker's lines (options.prefixTemplate substituted; ${time} and
// ${elapsed} left for each batch of lines).
LinePrefix linePrefix(const LogRouterOptions& options, int localRank, int rank, int groupRank,
                      int attempt);

// Thread safety: not thread-safe. Use it from the io_context's thread only (the one running
// io_context::run()); its callbacks run there too.
class LogRouter final : public WorkerOutput {
 public:
  static constexpr std::size_t kMaxLineBytes = 64 * 1024;
  static constexpr std::chrono::seconds kStallLimit{30};

  // `io` must outlive the LogRouter.
  LogRouter(boost::asio::io_context& io, LogRouterOptions options);
  // Closes everything like closeAll(), but a pending drain's callback is dropped, not called.
  ~LogRouter() override;
  LogRouter(const LogRouter&) = delete;
  LogRouter& operator=(const LogRouter&) = delete;

  // Before spawning worker `localRank` (global `rank`, node `groupRank`) of attempt `attempt`.
  // attemptDir: the attempt's directory, or "" for none. Creates the rank's directory
  // (rankDirectory), its log files when `logFiles`, and the pipes. A rank still open from an
  // earlier attempt is closed first (its partial line flushed). Throws std::system_error naming the
  // path on failure (nothing of this rank stays open then).
  ChildStreams prepare(int localRank, int rank, int groupRank, int attempt,
                       const std::string& attemptDir, bool logFiles) override;
  // After fork: closes the child's ends in the agent and starts reading. No-op for an unknown rank.
  void started(int localRank) override;
  // Spawn failed: closes everything prepared for this worker. No-op for an unknown rank.
  void abandon(int localRank) override;
  // Calls `done` (posted to the io_context, never from inside drain()) once every started
  // worker's streams have reached EOF, or after `grace` (a grandchild may hold a pipe open after
  // the worker died): the streams still open are then flushed (partial lines included) and
  // closed. Several drains may be pending; all complete together.
  void drain(std::chrono::milliseconds grace, std::function<void()> done) override;
  // The rank's last stderr lines; with one channel for both streams, that channel's (stdout's
  // lines among them).
  std::vector<std::string> stderrTail(int localRank) const override;
  // Flushes and closes everything now (agent exiting); pending drains complete (posted).
  void closeAll() override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared: asynchronous handlers hold weak references to it
};

}  // namespace ddprun::launcher
