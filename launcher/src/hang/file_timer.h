// FileTimers: torch's FileTimer watchdog protocol (torch.distributed.elastic.timer.
// FileTimerServer), served by the agent. A worker's FileTimerClient writes JSON lines such as
//   {"version": 1, "pid": 123, "scope_id": "step", "expiration_time": 1767225605.2, "signal": 9}
// into a named pipe (TORCHELASTIC_TIMER_FILE); a negative expiration_time releases the timer
// (pid, scope_id). When a timer expires the worker is to receive its signal (a signal <= 0 never
// kills). Unlike torch's server (a thread polling every 0.1 s) one EventLoop timer is armed for
// the earliest deadline: no work at all while no timer is due.
//
// Job control: while the job is stopped (Ctrl-Z) its workers cannot release their timers, so
// the deadlines they gave (epoch times) are moved on by the time the job stood still: pause()
// and resume(). torch's server, polling in the stopped agent, fires them all at the resume.
//
// Thread safety: every method runs on the event loop's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/event_loop.h"

namespace ddprun::launcher {

struct FileTimerRequest {
  int version = 1;
  pid_t pid = 0;
  std::string scopeId;
  double expirationTime = 0;  // epoch seconds; < 0: release
  int signal = 0;
};

// Parses one request line (without its newline). Nothing when it is not a request (not JSON, a
// missing or mistyped key, a pid <= 0, which kill(2) would take for a process group or for every
// process): the caller logs and drops it, as torch's server would not crash. "version" may be
// absent (torch's server never reads it).
std::optional<FileTimerRequest> parseFileTimerRequest(std::string_view line);

// A due timer: the worker `pid` is to receive `signal` because timer `scopeId` expired. Whether
// `pid` may be signalled at all is the caller's to decide (AgentMachine: only the job's own
// processes, where torch's server signals whatever pid a request names).
struct FileTimerExpiry {
  pid_t pid = 0;
  std::string scopeId;
  int signal = 0;
  double expirationTime = 0;  // when it was due: the worker's deadline plus the time stopped
};

class FileTimers {
 public:
  using Expired = std::function<void(const FileTimerExpiry&)>;
  // `expired` is called on the loop once per pid whose timers are due, with the earliest due
  // timer of that pid that has a signal > 0 (torch's rule); then every timer of that pid is
  // cleared. A pid whose due timers all have signal <= 0 is not reported; its due timers are
  // cleared. `expired` may call forget(), clear() and apply() (the timer is re-armed once the
  // pass is over), but must not destroy this FileTimers.
  FileTimers(EventLoop& loop, Expired expired);
  // One request line from the pipe.
  void onLine(std::string_view line);
  void apply(const FileTimerRequest& request);
  // Drops every timer of `pid` (the worker exited) or all of them (a new round).
  void forget(pid_t pid);
  void clear();
  // The job is stopped: nothing fires until resume(); requests are still taken.
  void pause();
  // The job runs again: every timer taken so far is due that much later, the time since pause()
  // added to its deadline (a worker armed it before it was stopped, and could not run since).
  void resume();
  std::size_t size() const { return timers_.size(); }

 private:
  using Map = std::map<std::pair<pid_t, std::string>, FileTimerRequest>;
  std::pair<Map::iterator, Map::iterator> timersOf(pid_t pid);
  void rearm();
  void fire();

  EventLoop& loop_;
  Expired expired_;
  Map timers_;
  std::unique_ptr<EventLoop::Timer> timer_;
  EventLoop::WallTime armedFor_;  // the deadline timer_ is armed for
  bool firing_ = false;           // fire() is reporting expiries; it re-arms once done
  std::optional<EventLoop::WallTime> pausedAt_;  // the job is stopped since then
};

// The log of FileTimer signals refused because the pid a request named is not one of the job's
// processes. Any worker may name any pid, as often as it likes, so a refusal is not a line each:
// the first is logged in full; those that follow within `window` are counted and logged as one
// line (how many, and the first few pids) when the window ends, which opens the next one, so a
// worker that keeps asking gets one line per window at most. A quiet window closes the
// series: the next refusal is logged in full again.
class FileTimerRefusals {
 public:
  static constexpr std::chrono::milliseconds kWindow = std::chrono::minutes(1);
  // How many pids the counted line names.
  static constexpr std::size_t kNamedPids = 8;

  explicit FileTimerRefusals(EventLoop& loop, std::chrono::milliseconds window = kWindow);
  // `expiry` was refused: no signal was sent.
  void refused(const FileTimerExpiry& expiry);
  // Logs what is counted and not logged yet (the agent is finishing, or a test looks).
  void flush();
  // Refusals seen in all (logged or counted).
  std::size_t total() const { return total_; }

 private:
  void windowEnded();

  EventLoop& loop_;
  std::chrono::milliseconds window_;
  std::unique_ptr<EventLoop::Timer> timer_;  // the open window; none: the next refusal is logged
  std::size_t counted_ = 0;                  // refusals since the last line
  std::vector<pid_t> countedPids_;           // the first kNamedPids distinct ones of them
  bool morePids_ = false;                    // and others beyond those
  std::size_t total_ = 0;
};

}  // namespace ddprun::launcher
