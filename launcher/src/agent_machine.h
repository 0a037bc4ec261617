// AgentMachine: the agent's state machine, and nothing else. It owns no thread, socket or
// process: it reacts to events (a round formed, a worker exited, a stop arrived, a signal) and
// acts through its seams: ProcessLauncher (workers), WorkerOutput (their output), RendezvousClient
// (membership, asynchronous: outcomes come back as events) and EventLoop (time, timers). The real
// agent (agent.cc) wires it to Asio, POSIX processes and the TCP store; the unit tests wire it to
// a fake launcher, the in-process store and a manual clock.
//
//   joining --round formed--> running --all local workers exit 0--> local done --kDone--> exit 0
//                               |  \                                    |
//            a worker failed / a stop arrives / a signal                 | a stop arrives
//                               v                                        v
//                            stopping (signal, grace, SIGKILL) --all gone--> next step:
//              worker failed: restart (job-global budget) or fail with the root cause's code;
//              node lost/joined/left: re-form (no restart counted); signal: exit 128+signal.
//
// Thread safety: every method runs on the event loop's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/launcher/launch_config.h"
#include "event_loop.h"
#include "event_log.h"
#include "exit_codes.h"
#include "failure_report.h"
#include "file_timer.h"
#include "hang_evidence.h"
#include "membership.h"
#include "oom.h"
#include "process_launcher.h"
#include "progress_watch.h"
#include "stop_reason.h"
#include "worker_output.h"

namespace ddprun::launcher {

// Membership, asynchronously: each call returns at once and its outcome reaches the machine
// later, on the loop (RendezvousEvents). Calls run in the order they are made.
class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;
  // Opens the membership first if it is not open. Outcome: onRoundFormed or onRendezvousFailed.
  virtual void join(int round) = 0;
  // Fire and forget: a lost store is reported by the watch.
  virtual void announce(int round, StopReason stop) = 0;
  virtual void markDone(int round, int members) = 0;
  // Outcome: onStop for `round`, or onStoreLost.
  virtual void watch(int round) = 0;
  // This node's id in the rendezvous (valid once a round formed).
  virtual std::int64_t nodeId() const = 0;
};

// Why a join failed for good.
struct RendezvousFailure {
  enum class Kind {
    kFailed,    // the rendezvous failed (exit 1)
    kBadInput,  // what the user gave is wrong (an endpoint, a node rank): exit 2
    kJobOver,   // the job finished without this agent, which waited for a place: exit 0
  };
  Kind kind = Kind::kFailed;
  std::string message;
};

// What the machine needs to know about this agent and its surroundings.
struct AgentIdentity {
  std::string hostname;
  std::string agentToken;    // DDPRUN_AGENT of this agent's workers
  std::string scratchDir;    // error files when there is no --log-dir
  std::string logRunDir;     // with --log-dir: this run's own "<log-dir>/<run id>_<random>"
  std::map<std::string, std::string> environment;  // the agent's own (workers inherit it)
  bool hostsStore = false;   // this agent hosts the rendezvous store (it must outstay the others)
  // Where the summary and the final error line go (nothing: stderr, written directly).
  std::function<void(std::string)> printError;
};

// How the machine sees workers that hang or die unexplained. Each may be missing (not watched).
struct WorkerWatch {
  Heartbeats* heartbeats = nullptr;       // progress channels (--hang-timeout)
  EvidenceCollector* evidence = nullptr;  // a hung worker's stacks, taken before it is killed
  OomWitness* oom = nullptr;              // OOM kills
  // --event-log-handler console: where each event's JSON line goes (nothing: no events).
  std::function<void(std::string)> event;
};

class AgentMachine {
 public:
  enum class State { kIdle, kJoining, kRunning, kLocalDone, kStopping, kFinished };
  using Finished = std::function<void(int exitCode)>;

  // Every reference must outlive the machine. `finished` is called once, on the loop, when the
  // agent is done (every worker gone, their output drained).
  AgentMachine(const LaunchConfig& config, AgentIdentity identity, EventLoop& loop,
               ProcessLauncher& launcher, WorkerOutput& output, RendezvousClient& rendezvous,
               WorkerWatch watch, Finished finished);

  // Joins the job.
  void start();

  // --- events ---
  void onRoundFormed(Round round);
  void onRendezvousFailed(const RendezvousFailure& failure);
  void onStop(int round, StopReason stop);
  void onStoreLost(const std::string& reason);
  // SIGCHLD: reaps through the launcher and judges the workers.
  void onChildExited();
  // A handled signal (SIGTERM, SIGINT, ...).
  void onSignal(int signal);
  // The agent's stdout stopped taking output (its reader exited: `ddprun ... | head`).
  void onConsoleClosed();
  // A line from torch's FileTimer pipe (TORCHELASTIC_TIMER_FILE).
  void onFileTimerLine(std::string_view line);

  State state() const { return state_; }
  const Round& round() const { return round_; }
  // The ending, once the state is kFinished.
  const std::optional<Ending>& ending() const { return ending_; }

 private:
  struct LocalWorker {
    int localRank = 0;
    int rank = 0;
    pid_t pid = -1;
    std::string errorFile;
    bool running = false;
    bool judged = false;  // its exit has been looked at
    int waitStatus = 0;
    double exitedAt = 0;
    // Found hung: why, and where it was (filled when the evidence arrives).
    HangKind hang = HangKind::kNone;
    std::string hangDetail;
    std::vector<std::string> stack;
    std::string evidenceFile;
  };

  void startWorkers();
  void startWorker(int localRank, const std::string& attempt);
  // A running worker is hung: its stacks are taken, then it gets `signal`.
  void onHung(int localRank, HangKind kind, std::string detail, int signal);
  void onFileTimerExpired(const FileTimerExpiry& expiry);
  // Writes the evidence into the attempt's log directory and keeps its telling lines.
  void keepEvidence(LocalWorker& worker, const HangEvidence& evidence);
  // An event of this agent, its common metadata filled (--event-log-handler console).
  WorkerEvent agentEvent(std::string name, const char* state) const;
  void emitWorkerEvent(const LocalWorker& worker, const char* state, nlohmann::json rawError = nullptr,
                       nlohmann::json extra = nlohmann::json::object()) const;
  LocalWorker* workerByPid(pid_t pid);
  // Looks at the workers that exited: a failure stops the round, all done counts the node done.
  void judgeWorkers();
  void announceFailure();
  void stopWorkers();
  // Stops the workers, then ends the agent with `ending` (at once when none runs).
  void endOnceStopped(Ending ending);
  void maybeRoundOver();
  void nextStep();
  void failJob(const StopReason& stop);
  void finish(Ending ending);
  void printError(std::string text) const;
  std::string attemptDirectory(int round) const;
  WorkerFailure failureOf(const LocalWorker& worker) const;

  const LaunchConfig& config_;
  AgentIdentity identity_;
  EventLoop& loop_;
  ProcessLauncher& launcher_;
  WorkerOutput& output_;
  RendezvousClient& rendezvous_;
  WorkerWatch watch_;
  Finished finished_;
  ProgressWatch progress_;
  FileTimers fileTimers_;
  const double startedAt_;  // epoch seconds, for the events' total_run_time

  State state_ = State::kIdle;
  Round round_;
  std::vector<LocalWorker> local_;
  std::optional<StopReason> stop_;            // why the current round stops
  std::vector<WorkerFailure> localFailures_;  // this node's, in the current round
  int signal_ = 0;                            // a handled signal that arrived
  std::optional<Ending> endAfterStop_;        // end so once the workers are gone
  std::optional<Ending> ending_;
  std::unique_ptr<EventLoop::Timer> graceTimer_;
  std::unique_ptr<EventLoop::Timer> barrierTimer_;
};

}  // namespace ddprun::launcher
