// AgentMachine: the agent's state machine, and nothing else. It owns no thread, socket or
// process: it reacts to events (a round formed, a worker exited, a stop arrived, a signal) and
// acts through its seams: ProcessLauncher (workers), WorkerOutput (their output and files),
// RendezvousClient (membership, asynchronous: outcomes come back as RendezvousEvents),
// WorkerStoreHost (the round's workers' store, when this node hosts it) and EventLoop (time, both
// clocks, timers). It opens no file and reads no clock of its own. The real
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
// Health gate (health/health_gate.h): each join, the first and every next one, waits for the
// gate's verdict. A node that fails it does not join: it stands aside (the others count it lost
// and never wait for it), says which check failed and why, and checks again after a cooldown that
// doubles with each failure in a row (--health-cooldown); once it passes it joins the job again as
// a new member. The post-round hook runs once a round's workers have ended, before the next step.
//
// Job control (Ctrl-Z) is across all states: onSuspend() stops every worker and pauses every
// timeout of this agent; onResume() continues the workers and gives the timeouts their time
// back (the wiring stops the agent's own process in between).
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

#include "core/agent_snapshot.h"
#include "core/event_loop.h"
#include "core/exit_codes.h"
#include "core/job_metrics.h"
#include "core/process_launcher.h"
#include "core/rendezvous_client.h"
#include "core/restart_policy.h"
#include "core/stop_reason.h"
#include "core/stop_requests.h"
#include "core/worker_output.h"
#include "ddprun/launcher/launch_config.h"
#include "hang/file_timer.h"
#include "hang/hang_evidence.h"
#include "hang/oom.h"
#include "hang/progress_monitor.h"
#include "hang/worker_activity.h"
#include "health/health_gate.h"
#include "machine/incident_timeline.h"
#include "machine/pausable_timer.h"
#include "report/event_log.h"
#include "report/failure_report.h"
#include "report/missing_module.h"

namespace ddprun::launcher {

// What the machine needs to know about this agent and its surroundings.
struct AgentIdentity {
  std::string hostname;
  std::string address;      // where the other nodes reach this one (as its NodeInfo says)
  std::string agentMarker;  // DDPRUN_AGENT of this agent's workers (not a secret: a tag)
  std::string scratchDir;   // error files when there is no --log-dir
  std::string logRunDir;    // with --log-dir: this run's own "<log-dir>/<run id>_<random>"
  std::string privateDir;   // the agent's own (0700): the Flight Recorder's pipes ("" = none)
  std::map<std::string, std::string> environment;  // the agent's own (workers inherit it)
  bool hostsStore = false;  // this agent hosts the rendezvous store (it must outstay the others)
  // Where the summary and the final error line go (nothing: stderr, written directly).
  std::function<void(std::string)> printError;
};

// How the machine sees workers that hang or die unexplained, and how it asks them to stop without
// a signal. Each may be missing (that part is not looked at).
struct WorkerDiagnostics {
  Heartbeats* heartbeats = nullptr;       // progress channels (--hang-timeout)
  EvidenceCollector* evidence = nullptr;  // a hung worker's stacks, taken before it is killed
  OomWitness* oom = nullptr;              // OOM kills
  WorkerActivity* activity = nullptr;     // busy or idle (--exit-timeout's stragglers)
  StopRequests* stopRequests = nullptr;   // DDPRUN_STOP_FILE: a graceful stop's notice
  // --event-log-handler console: where each event's JSON line goes (nothing: no events).
  std::function<void(std::string)> event;
  // The node's own health before each join and the hooks around a round (nothing: none).
  HealthGate* health = nullptr;
};

class AgentMachine final : public RendezvousEvents {
 public:
  enum class State { kIdle, kJoining, kRunning, kLocalDone, kStopping, kFinished };
  using Finished = std::function<void(int exitCode)>;

  // Every reference must outlive the machine. `finished` is called once, on the loop, when the
  // agent is done (every worker gone, their output drained).
  AgentMachine(const LaunchConfig& config, AgentIdentity identity, EventLoop& loop,
               ProcessLauncher& launcher, WorkerOutput& output, RendezvousClient& rendezvous,
               WorkerStoreHost& workerStores, WorkerDiagnostics diagnostics, Finished finished);

  // Joins the job.
  void start();

  // --- events ---
  // RendezvousEvents:
  void onRoundFormed(Round round) override;
  void onRendezvousFailed(const RendezvousFailure& failure) override;
  void onStop(int round, StopReason stop) override;
  void onStoreLost(const StoreLoss& loss) override;
  // SIGCHLD: reaps through the launcher and judges the workers.
  void onChildExited();
  // A handled signal (SIGTERM, SIGINT, ...).
  void onSignal(int signal);
  // Job control: the job is to stop (SIGTSTP, SIGTTIN, SIGTTOU: Ctrl-Z, or a background job
  // touching the terminal). Every worker is stopped and no timeout counts until onResume().
  void onSuspend(int signal);
  // The job is continued (SIGCONT: fg, bg): the workers too, and every timeout resumes, the
  // stopped time not counted. Nothing when the job was not suspended.
  void onResume();
  bool suspended() const { return suspendedAt_.has_value(); }
  // The agent's stdout stopped taking output (its reader exited: `ddprun ... | head`).
  void onConsoleClosed();
  // A line from torch's FileTimer pipe (TORCHELASTIC_TIMER_FILE).
  void onFileTimerLine(std::string_view line);
  // Worker `localRank` wrote a line matching --fail-pattern (`detail` says which, escaped): it
  // fails, of the user's class (hang/line_progress.h).
  void onFailLine(int localRank, std::string detail);

  State state() const { return state_; }
  const Round& round() const { return round_; }
  // Where this node's workers reach the current round's workers' store (MASTER_ADDR:PORT).
  const std::pair<std::string, std::uint16_t>& workersStore() const { return workersStore_; }
  // The ending, once the state is kFinished.
  const std::optional<Ending>& ending() const { return ending_; }
  // What this agent is doing now (`ddprun status`, /healthz): taken on the loop's thread.
  AgentSnapshot snapshot() const;
  // What it counted over the job (/metrics): read on the loop's thread.
  const JobMetrics& metrics() const { return metrics_; }

 private:
  struct LocalWorker {
    int localRank = 0;
    int rank = 0;
    pid_t pid = -1;
    std::string errorFile;
    bool running = false;
    bool judged = false;   // its exit has been looked at
    bool failed = false;   // judged a failure (or could not start)
    double startedAt = 0;  // epoch seconds
    int waitStatus = 0;
    double exitedAt = 0;
    // Found hung: why, and where it was (filled when the evidence arrives).
    HangKind hang = HangKind::kNone;
    std::string hangDetail;
    std::optional<double> hungAt;       // epoch seconds it was found hung
    std::optional<double> silentSince;  // its last progress (or start), for the no-progress rules
    std::vector<std::string> stack;
    std::string evidenceFile;
    // Its evidence is being collected; the signal it gets once every hung worker's is in.
    bool evidencePending = false;
    int hangSignal = 0;
    // PyTorch's Flight Recorder: its pipe and dump (nothing: off for this worker), and what came
    // of asking it before the kill.
    std::optional<FlightRecorderTarget> flightRecorder;
    std::string flightRecorderDump;
    std::string flightRecorderNote;
  };

  // Hosts the round's workers' store when the round says so; false when it cannot (the agent
  // then ends).
  bool applyWorkerStore();
  // Prepares every worker of the round first (directories, pipes, environments), then spawns
  // them back to back: a new worker then takes a CPU from the loop only once all have started.
  void startWorkers();
  // Fills `worker` (its ranks, error file) and returns its plan; throws when it cannot start.
  std::unique_ptr<ExecPlan> prepareWorker(LocalWorker& worker, const std::string& attempt);
  // The Flight Recorder's variables for `worker` (none when its environment leaves the recorder
  // off), its target kept in `worker`.
  std::map<std::string, std::string> prepareFlightRecorder(LocalWorker& worker,
                                                           const std::string& attempt);
  // A worker that cannot start is a failure like any other (exit code 127, as a shell).
  void workerCannotStart(LocalWorker& worker, const std::exception& error);
  // A running worker is hung: its stacks are taken, then it gets `signal`.
  void onHung(int localRank, HangKind kind, std::string detail, int signal);
  void onFileTimerExpired(const FileTimerExpiry& expiry);
  // Writes the evidence into the attempt's log directory and keeps its telling lines.
  void keepEvidence(LocalWorker& worker, const HangEvidence& evidence);
  // Once no hung worker's evidence is pending: the signal to every hung worker still running.
  void signalHungWorkers();
  // An event of this agent, its common metadata filled (--event-log-handler console).
  WorkerEvent agentEvent(std::string name, const char* state) const;
  void emitWorkerEvent(const LocalWorker& worker, const char* state,
                       nlohmann::json rawError = nullptr,
                       nlohmann::json extra = nlohmann::json::object()) const;
  LocalWorker* workerByPid(pid_t pid);
  // Looks at the workers that exited: a failure stops the round, all done counts the node done.
  void judgeWorkers();
  void announceFailure();
  // A graceful stop: the attempt's stop request (DDPRUN_STOP_FILE) says `reason` and the
  // deadline, then each worker's own process gets the signal (the one the agent got, else
  // SIGTERM); at --shutdown-timeout's deadline every worker's tree gets SIGKILL.
  void stopWorkers(std::string_view reason);
  // The stop's deadline: SIGKILL to whatever of the workers' trees is left.
  void onStopDeadline();
  // Stops the workers (saying `reason`), then ends the agent with `ending` (at once when none
  // runs).
  void endOnceStopped(Ending ending, std::string_view reason);
  void maybeRoundOver();
  void nextStep();
  // Joins round `round` once this node passes the health gate (at once without one).
  void joinRound(int round);
  void onHealthVerdict(int round, const HealthVerdict& verdict);
  // The post-round hook of round_ (once), then `next`; at once without one.
  void afterRound(std::function<void()> next);
  // Liveness and fencing (docs/architecture.md): while this node has workers of a round, a timer
  // on the loop fires at the last acknowledged renewal's send + the fencing interval; checked
  // then, and re-armed when a renewal was acknowledged meanwhile.
  void armFence();
  void checkFence();
  // Stops this node's workers at once (SIGKILL to every worker's tree, then the stray sweep) and
  // fences the round off; then the node rejoins as a new member where the job takes nodes back,
  // else ends with `ending` (storeLost). `why` says what happened, for the log.
  void fenceNow(const std::string& why);
  // When the root cause died for want of a Python module, one line naming the interpreter, where
  // it came from and what to set (report/missing_module.h).
  void printMissingModuleHint(const WorkerFailure& cause);
  // c10d or etcd with MIN < MAX: the job may go on with fewer nodes.
  bool elastic() const;
  // c10d or etcd: a node may come back as a new member, as a replacement would join (a static
  // job's node ranks are fixed: it may not).
  bool takesNodesBack() const;
  // Running, done locally or stopping: this node has (or had until now) workers of round_.
  bool hasWorkersOfRound() const;
  // The send of the last acknowledged renewal, or the resume after a Ctrl-Z of an agent hosting
  // the store (fenceFrom_) if later; nothing before the first acknowledged renewal.
  std::optional<EventLoop::TimePoint> fenceCountsFrom() const;
  // Seconds since the send of the last acknowledged liveness renewal.
  double silentSeconds() const;
  // This node leaves the job (--max-node-failures: the decision says so, `text` why): the
  // warning, the event, the snapshot's reason, and its end with class machine.
  void leaveUntrusted(const StopReason& stop, const RestartDecision& decision,
                      const std::string& text);
  // The event of a node left out (`ddprun.node.left_out`), from the leaving node (state FAILED)
  // or one that goes on without it (RESTARTING).
  void emitLeftOut(const StopReason& stop, const RestartDecision& decision, const std::string& text,
                   const char* state) const;
  // Fails the job with the stop's root cause, for the reason and class `decision` gives.
  void failJob(const StopReason& stop, const RestartDecision& decision);
  // Whether this node's current round made progress so far: a worker's heartbeat advanced, a
  // FileTimer request arrived, or it ran --progress-min-time (the evidence a failure carries).
  bool roundMadeProgress() const;
  // Keeps `failure` as the last one this agent knows of (snapshot()).
  void noteFailure(const WorkerFailure& failure);
  // While the open incident waits for its first progress report: looks at the heartbeats every
  // kProgressLook until one is newer than the workers' start, or the round stops.
  void watchFirstProgress();
  // A closed incident: its log line and its `ddprun.incident` event.
  void onIncidentClosed(const Incident& incident);
  // The rendezvous is asked for a round now (formation is timed from here).
  void joinNow(int round);
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
  WorkerStoreHost& workerStores_;
  WorkerDiagnostics diagnostics_;
  Finished finished_;
  ProgressMonitor progress_;
  FileTimers fileTimers_;
  FileTimerRefusals fileTimerRefusals_;  // FileTimer signals to processes not the job's
  const double startedAt_;               // epoch seconds, for the events' total_run_time

  State state_ = State::kIdle;
  Round round_;
  std::pair<std::string, std::uint16_t> workersStore_;  // the workers' MASTER_ADDR:MASTER_PORT
  std::vector<LocalWorker> local_;
  std::optional<StopReason> stop_;            // why the current round stops
  std::vector<WorkerFailure> localFailures_;  // this node's, in the current round
  std::optional<WorkerFailure> lastFailure_;  // the job's last one this agent knows of
  bool formed_ = false;                       // a round has formed (round_ is one)
  int signal_ = 0;                            // a handled signal that arrived
  // Stopping for that signal: once the workers have exited, what they left in their process
  // groups (a wrapper script's trainer still saving) is waited for until the stop's deadline.
  bool drainGroups_ = false;
  bool saidLeftBehind_ = false;          // the wait for what the workers left was announced
  std::string stopFile_;                 // the current attempt's DDPRUN_STOP_FILE ("" = none)
  EventLoop::TimePoint stopDeadline_{};  // the current stop's SIGKILL (for the waiting line)
  std::optional<Ending> endAfterStop_;   // end so once the workers are gone
  std::optional<Ending> ending_;
  PausableTimer graceTimer_;
  PausableTimer barrierTimer_;
  PausableTimer backoffTimer_;             // the wait before a restart (--restart-backoff)
  std::optional<double> restartAt_;        // epoch seconds the back-off ends at, while it runs
  EventLoop::TimePoint roundStartedAt_{};  // when this node's workers of round_ were started
  bool fileTimerRequests_ = false;         // a FileTimer request arrived during round_
  std::optional<FailureClass> lastFailureClass_;  // the class of the last stop's decision
  // Why this node left the job (--max-node-failures), once it has.
  std::optional<std::string> leftOut_;
  std::optional<EventLoop::TimePoint> suspendedAt_;  // the job is stopped (job control) since then
  std::unique_ptr<EventLoop::Timer> fenceTimer_;
  // This agent hosts the store and was stopped (Ctrl-Z) with it: the store gave its holds the
  // stopped time back, so the fence counts from the resume at the earliest.
  std::optional<EventLoop::TimePoint> fenceFrom_;
  bool fenced_ = false;           // the round's workers are being stopped by the fence
  bool rejoinAfterStop_ = false;  // then rejoin as a new member (takesNodesBack)
  // The health gate: its check in flight, the cooldown after a failure, and what `ddprun status`
  // shows of this node's exclusions.
  bool gateRunning_ = false;
  bool standingAside_ = false;  // out of the rounds since the gate failed: comes back as new
  PausableTimer cooldownTimer_;
  int exclusions_ = 0;    // times this node stayed out of a round
  int gateFailures_ = 0;  // in a row (the cooldown doubles with each)
  std::optional<std::string> lastExclusion_;
  std::optional<double> healthRetryAt_;  // epoch seconds the cooldown ends at, while it runs
  int postRoundRan_ = -1;                // the round whose post-round hook ran
  // /metrics and the incident timeline (`ddprun status`, the ddprun.incident events).
  JobMetrics metrics_;
  IncidentTimeline incidents_;
  std::unique_ptr<EventLoop::Timer> progressWatch_;
  std::optional<EventLoop::TimePoint> joinedAt_;  // the rendezvous was last asked for a round
};

}  // namespace ddprun::launcher
