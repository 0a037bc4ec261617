#include "machine/agent_machine.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/shown_text.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/text.h"
#include "ddprun/common/worker_env_names.h"
#include "hang/flight_recorder.h"
#include "process/worker_env.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// How long the workers' last output may take to arrive once they are gone (a grandchild may hold
// a pipe open after its worker died).
constexpr auto kOutputGrace = 200ms;

// How many lines of a hung worker's stacks the failure summary and the log show.
constexpr std::size_t kSummaryStackLines = 24;

// How often the heartbeats are looked at while an incident waits for the first progress after
// the restart: the precision of its progress_at, at one stat per worker per look.
constexpr auto kProgressLook = 200ms;

double epochSeconds(EventLoop::WallTime time) {
  return std::chrono::duration<double>(time.time_since_epoch()).count();
}

}  // namespace

AgentMachine::AgentMachine(const LaunchConfig& config, AgentIdentity identity, EventLoop& loop,
                           ProcessLauncher& launcher, WorkerOutput& output,
                           RendezvousClient& rendezvous, WorkerStoreHost& workerStores,
                           WorkerDiagnostics diagnostics, Finished finished)
    : config_(config),
      identity_(std::move(identity)),
      loop_(loop),
      launcher_(launcher),
      output_(output),
      rendezvous_(rendezvous),
      workerStores_(workerStores),
      diagnostics_(std::move(diagnostics)),
      finished_(std::move(finished)),
      progress_(loop, config.hang, diagnostics_.heartbeats, diagnostics_.activity,
                [this](const HungWorker& hung) {
                  // Evidence first, then SIGKILL: a hung worker may ignore SIGTERM, or hang in
                  // its handler.
                  onHung(hung.localRank, hung.kind, hung.detail, SIGKILL);
                }),
      fileTimers_(loop, [this](const FileTimerExpiry& expiry) { onFileTimerExpired(expiry); }),
      fileTimerRefusals_(loop),
      startedAt_(epochSeconds(loop_.wallNow())),
      graceTimer_(loop),
      barrierTimer_(loop),
      backoffTimer_(loop),
      cooldownTimer_(loop),
      incidents_(metrics_, [this](const Incident& incident) { onIncidentClosed(incident); }) {}

void AgentMachine::start() {
  state_ = State::kJoining;
  joinRound(-1);
}

void AgentMachine::joinNow(int round) {
  joinedAt_ = loop_.now();
  rendezvous_.join(round);
}

void AgentMachine::joinRound(int round) {
  if (diagnostics_.health == nullptr) {
    joinNow(round);
    return;
  }
  gateRunning_ = true;
  diagnostics_.health->check(round, [this, round](const HealthVerdict& verdict) {
    gateRunning_ = false;
    onHealthVerdict(round, verdict);
  });
}

void AgentMachine::onHealthVerdict(int round, const HealthVerdict& verdict) {
  if (state_ != State::kJoining) return;  // a signal ended the agent meanwhile
  if (signal_ != 0) {
    finish(Ending::signalled(signal_));
    return;
  }
  if (verdict.passed) {
    gateFailures_ = 0;
    if (!standingAside_) {
      joinNow(round);
      return;
    }
    standingAside_ = false;
    spdlog::info("health gate: this node passes again; joining the job as a new member");
    joinNow(-1);
    return;
  }
  ++exclusions_;
  ++gateFailures_;
  const std::string why = fmt::format("{}: {}", verdict.check, verdict.reason);
  lastExclusion_ = why;
  const auto& health = config_.health;
  const auto cooldown = doublingWait(gateFailures_, health.cooldownInitial, health.cooldownCap);
  const double wait = std::chrono::duration<double>(cooldown).count();
  spdlog::warn(
      "health gate: {} failed: {}; this node stays out of the job and checks again in {:.1f} s "
      "(exclusion {}, {} in a row; --health-cooldown)",
      verdict.check, verdict.reason, wait, exclusions_, gateFailures_);
  if (diagnostics_.event) {
    WorkerEvent event = agentEvent("ddprun.node.health_excluded", "UNHEALTHY");
    event.extra = {{"failure_class", failureClassName(FailureClass::kMachine)},
                   {"check", common::validUtf8(verdict.check)},
                   {"reason", common::validUtf8(verdict.reason)},
                   {"exclusions", exclusions_},
                   {"cooldown_s", wait}};
    diagnostics_.event(eventLine(event));
  }
  lastFailureClass_ = FailureClass::kMachine;
  if (!standingAside_) {
    // The others count this node lost and form the next round without it.
    standingAside_ = true;
    rendezvous_.standAside();
  }
  healthRetryAt_ = epochSeconds(loop_.wallNow()) + wait;
  cooldownTimer_.arm(cooldown, [this] {
    healthRetryAt_.reset();
    if (state_ != State::kJoining) return;
    joinRound(-1);
  });
}

void AgentMachine::afterRound(std::function<void()> next) {
  if (diagnostics_.health == nullptr || postRoundRan_ == round_.number) {
    next();
    return;
  }
  postRoundRan_ = round_.number;
  diagnostics_.health->afterRound(round_.number, [this, next = std::move(next)] {
    if (state_ == State::kFinished) return;
    next();
  });
}

std::string AgentMachine::attemptDirectory(int round) const {
  const fs::path base =
      config_.logs.dir.empty() ? fs::path(identity_.scratchDir) : fs::path(identity_.logRunDir);
  return (base / fmt::format("attempt_{}", round)).string();
}

void AgentMachine::onRendezvousFailed(const RendezvousFailure& failure) {
  if (state_ == State::kFinished) return;
  if (failure.kind == RendezvousFailure::Kind::kJobOver) {
    spdlog::warn("{}", failure.message);
    finish(Ending::succeeded());
  } else if (failure.kind == RendezvousFailure::Kind::kBadInput) {
    finish(Ending::badInput(fmt::format("ddprun: error: {}", failure.message)));
  } else {
    finish(Ending::rendezvousFailed(
        fmt::format("ddprun: error: rendezvous failed: {}", failure.message)));
  }
}

void AgentMachine::onRoundFormed(Round round) {
  if (state_ == State::kFinished) return;
  if (signal_ != 0) {  // a signal arrived while joining
    finish(Ending::signalled(signal_));
    return;
  }
  round_ = std::move(round);
  formed_ = true;
  ++metrics_.roundsFormed;
  if (joinedAt_) {
    metrics_.roundFormation.observe(
        std::chrono::duration<double>(loop_.now() - *joinedAt_).count());
    joinedAt_.reset();
  }
  stop_.reset();
  localFailures_.clear();
  if (!applyWorkerStore()) return;
  const bool relayed = workersStore_ != std::pair(round_.masterAddr, round_.masterPort);
  spdlog::info("round {}: group rank {} of {}, world size {}, master {}:{}{}, restart {}",
               round_.number, round_.groupRank, round_.nodes, round_.worldSize,
               shown(round_.masterAddr), round_.masterPort,
               relayed ? fmt::format(" (workers through the token relay on {}:{})",
                                     workersStore_.first, workersStore_.second)
                       : std::string(),
               round_.history.restarts);
  // With --log-dir, where this attempt's worker logs go, said where the console shows it after
  // a restart (a warning, as the restart's own line), so the lines after it are known to be
  // the new attempt's (${attempt} in the prefix says it on each line).
  if (!config_.logs.dir.empty()) {
    spdlog::log(round_.history.restarts > 0 ? spdlog::level::warn : spdlog::level::info,
                "round {} (restart {}): the workers' log files are in {}", round_.number,
                round_.history.restarts, attemptDirectory(round_.number));
  }
  rendezvous_.watch(round_.number);
  startWorkers();
  armFence();
}

bool AgentMachine::hasWorkersOfRound() const {
  return state_ == State::kRunning || state_ == State::kLocalDone || state_ == State::kStopping;
}

std::optional<EventLoop::TimePoint> AgentMachine::fenceCountsFrom() const {
  auto from = rendezvous_.livenessAcknowledgedAt();
  if (from && fenceFrom_ && *fenceFrom_ > *from) from = fenceFrom_;
  return from;
}

bool AgentMachine::elastic() const {
  return config_.rdzv.backend != RdzvBackend::kStatic &&
         config_.rdzv.minNodes < config_.rdzv.maxNodes;
}

bool AgentMachine::takesNodesBack() const { return config_.rdzv.backend != RdzvBackend::kStatic; }

double AgentMachine::silentSeconds() const {
  const auto acknowledged = rendezvous_.livenessAcknowledgedAt();
  return acknowledged ? std::chrono::duration<double>(loop_.now() - *acknowledged).count() : 0.0;
}

void AgentMachine::armFence() {
  fenceTimer_.reset();
  if (fenced_ || suspendedAt_) return;
  if (!hasWorkersOfRound()) return;
  const auto from = fenceCountsFrom();
  if (!from) return;
  // A timer on this loop, not the heartbeat's own progress: the renewal may be blocked in a
  // call on a cut network for longer than the fence allows.
  const auto due = *from + config_.rdzv.settings.fencingInterval();
  const auto delay = std::max(std::chrono::milliseconds(0),
                              std::chrono::ceil<std::chrono::milliseconds>(due - loop_.now()));
  fenceTimer_ = loop_.after(delay, [this] { checkFence(); });
}

void AgentMachine::checkFence() {
  if (fenced_ || suspendedAt_) return;
  if (!hasWorkersOfRound()) return;
  const auto from = fenceCountsFrom().value_or(loop_.now());
  if (loop_.now() < from + config_.rdzv.settings.fencingInterval()) {
    armFence();  // a renewal was acknowledged meanwhile
    return;
  }
  fenceNow(
      fmt::format("no liveness renewal of this node was acknowledged by the rendezvous store "
                  "at {} for {:.1f} s (the fencing interval, {:.1f} s, ends before the store can "
                  "count this node lost)",
                  rendezvous_.storeAddress(), silentSeconds(),
                  config_.rdzv.settings.fencingInterval().count() / 1000.0));
}

void AgentMachine::fenceNow(const std::string& why) {
  if (state_ == State::kFinished || fenced_) return;
  const double silent = silentSeconds();
  const std::string cut = fmt::format(
      "ddprun: error: the network to the rendezvous store at {} was cut: no answer for {:.1f} s; "
      "this "
      "node's workers were stopped before the others could count it lost. A static job does not "
      "take a node back: this agent ends (on c10d or etcd it rejoins as a new member)",
      rendezvous_.storeAddress(), silent);
  if (!hasWorkersOfRound()) {
    // No workers of a round: nothing to fence. A join in progress reports the store itself.
    if (!takesNodesBack())
      endOnceStopped(Ending::storeLost(cut), stopKindName(StopKind::kStoreLost));
    return;
  }
  fenced_ = true;
  fenceTimer_.reset();
  incidents_.fenced(round_.number, epochSeconds(loop_.wallNow()));
  rendezvous_.fence(round_.number);
  spdlog::warn(
      "{}: stopping this node's workers of round {} now, with SIGKILL (they are a stale group "
      "from here on); {}",
      why, round_.number,
      takesNodesBack() ? "then rejoining the job as a new member until join_timeout"
                       : "then ending, as a static job cannot take a node back");
  barrierTimer_.cancel();
  graceTimer_.cancel();
  progress_.stop();
  if (takesNodesBack()) {
    rejoinAfterStop_ = true;
  } else if (!endAfterStop_) {
    endAfterStop_ = Ending::storeLost(cut);
  }
  state_ = State::kStopping;
  drainGroups_ = false;
  // No grace: the fence's margin is for the kernel to take the trees down, not for the workers to
  // finish; the stray sweep follows once they are gone (maybeRoundOver), as for any stop.
  if (launcher_.anyRunning()) launcher_.signalAll(SIGKILL);
  maybeRoundOver();
}

bool AgentMachine::applyWorkerStore() {
  if (round_.hostsWorkerStore) {
    const std::string& address = round_.address;
    try {
      round_.masterPort = workerStores_.host(address);
    } catch (const std::exception& error) {
      onRendezvousFailed({RendezvousFailure::Kind::kFailed,
                          fmt::format("cannot host round {}'s workers' store on {}: {}",
                                      round_.number, address, error.what())});
      return false;
    }
    round_.masterAddr = address;
    rendezvous_.publishWorkerStore(round_.number, round_.masterAddr, round_.masterPort);
  }
  workersStore_ = workerStores_.reachFromWorkers(round_.masterAddr, round_.masterPort);
  return true;
}

void AgentMachine::startWorkers() {
  const std::string attempt = attemptDirectory(round_.number);
  const auto spawnStart = loop_.now();
  local_.clear();
  state_ = State::kRunning;
  roundStartedAt_ = spawnStart;
  fileTimerRequests_ = false;
  if (diagnostics_.oom) diagnostics_.oom->attemptStarted();
  // One stop request per attempt, shared by its workers: a fresh name, so a request made for
  // the last attempt's workers never stops these.
  stopFile_.clear();
  if (diagnostics_.stopRequests) {
    try {
      stopFile_ = diagnostics_.stopRequests->prepare();
    } catch (const std::exception& error) {
      spdlog::warn("{}: round {}'s workers get no {}; a stop reaches them by its signal only",
                   error.what(), round_.number, common::kEnvDdprunStopFile);
    }
  }
  // Everything a worker needs is made before the first spawn, so the spawns run back to back:
  // done between spawns, it ran while the workers already started competed for the CPUs. The
  // guarantees are each spawn's own and unchanged: PosixLauncher::spawn tells the guardian of
  // each worker as soon as it exists.
  const int count = config_.nprocPerNode;
  local_.resize(count);
  std::vector<std::unique_ptr<ExecPlan>> plans(count);
  for (int localRank = 0; localRank < count; ++localRank) {
    local_[localRank].localRank = localRank;
    try {
      plans[localRank] = prepareWorker(local_[localRank], attempt);
    } catch (const std::exception& error) {
      workerCannotStart(local_[localRank], error);
    }
  }
  const auto prepared = loop_.now();
  for (int localRank = 0; localRank < count; ++localRank) {
    if (!plans[localRank]) continue;
    try {
      local_[localRank].pid = launcher_.spawn(*plans[localRank]);
    } catch (const std::exception& error) {
      output_.abandon(localRank);
      workerCannotStart(local_[localRank], error);
      plans[localRank].reset();
    }
  }
  const auto spawned = loop_.now();
  for (int localRank = 0; localRank < count; ++localRank) {
    if (!plans[localRank]) continue;
    LocalWorker& worker = local_[localRank];
    output_.started(localRank);
    worker.running = true;
    worker.startedAt = epochSeconds(loop_.wallNow());
    emitWorkerEvent(worker, "HEALTHY");
  }
  std::vector<pid_t> pids;
  for (const LocalWorker& worker : local_) pids.push_back(worker.running ? worker.pid : -1);
  progress_.start(std::move(pids));
  incidents_.running(epochSeconds(loop_.wallNow()), diagnostics_.heartbeats != nullptr);
  watchFirstProgress();
  const auto ms = [](auto duration) {
    return std::chrono::duration<double, std::milli>(duration).count();
  };
  spdlog::debug(
      "round {}: started {} workers in {:.1f} ms (preparing {:.1f} ms, spawning {:.1f} ms)",
      round_.number, local_.size(), ms(loop_.now() - spawnStart), ms(prepared - spawnStart),
      ms(spawned - prepared));
  if (!localFailures_.empty()) announceFailure();
}

std::unique_ptr<ExecPlan> AgentMachine::prepareWorker(LocalWorker& worker,
                                                      const std::string& attempt) {
  const int localRank = worker.localRank;
  worker.rank = round_.baseRank + localRank;
  // The attempt's directory is new (the run's directories are made fresh by the agent, and each
  // round has its own), so no earlier job's error file can be taken for this worker's.
  worker.errorFile = rankDirectory(attempt, localRank) + "/error.json";
  const WorkerPlacement placement{localRank,        worker.rank,
                                  round_.worldSize, config_.nprocPerNode,
                                  round_.groupRank, round_.nodes};
  const RoundEnvironment roundEnvironment{workersStore_.first,     workersStore_.second,
                                          round_.history.restarts, round_.number,
                                          config_.rdzv.runId,      identity_.agentMarker};
  const WorkerCommand command = workerCommand(config_, placement, identity_.environment);
  const ChildStreams streams =
      output_.prepare(localRank, worker.rank, round_.groupRank, round_.number, attempt,
                      /*logFiles=*/!config_.logs.dir.empty());
  try {
    const std::string heartbeatFile =
        diagnostics_.heartbeats ? diagnostics_.heartbeats->prepare(localRank) : std::string();
    const std::vector<std::string> environment = workerEnvironment(
        identity_.environment, config_, placement, roundEnvironment, worker.errorFile,
        heartbeatFile, stopFile_, prepareFlightRecorder(worker, attempt));
    auto plan = std::make_unique<ExecPlan>(command.path, command.argv, environment, streams.out,
                                           streams.err);
    if (static_cast<std::size_t>(localRank) < config_.workerCpus.size()) {
      plan->bindToCpus(config_.workerCpus[static_cast<std::size_t>(localRank)]);
    }
    return plan;
  } catch (...) {
    output_.abandon(localRank);
    throw;
  }
}

std::map<std::string, std::string> AgentMachine::prepareFlightRecorder(LocalWorker& worker,
                                                                       const std::string& attempt) {
  worker.flightRecorder.reset();
  if (!flightRecorderEnabled(identity_.environment)) return {};
  // The pipes in the agent's private directory (the worker makes each, as torch does); the dump
  // in the rank's directory of the attempt (made by WorkerOutput::prepare), beside its error file.
  const std::string pipePrefix =
      identity_.privateDir.empty() ? std::string() : identity_.privateDir + "/nccl_pipe_rank_";
  auto plan = flightRecorderPlan(identity_.environment, worker.rank, pipePrefix,
                                 rankDirectory(attempt, worker.localRank) + "/nccl_trace_rank_");
  if (!plan) return {};
  worker.flightRecorder = plan->target;
  return plan->set;
}

void AgentMachine::workerCannotStart(LocalWorker& worker, const std::exception& error) {
  spdlog::error("cannot start worker {}: {}", worker.localRank, error.what());
  WorkerFailure failure;
  failure.rank = worker.rank;
  failure.localRank = worker.localRank;
  failure.groupRank = round_.groupRank;
  failure.host = identity_.hostname;
  failure.exitCode = 127;
  failure.observedAt = epochSeconds(loop_.wallNow());
  failure.message = error.what();
  if (const auto* spawn = dynamic_cast<const SpawnError*>(&error); spawn && spawn->error() != 0) {
    failure.startFault = WorkerFailure::StartFault{spawn->error(), spawn->exec()};
  }
  noteFailure(failure);
  localFailures_.push_back(failure);
  worker.judged = true;
  worker.failed = true;
}

void AgentMachine::onStop(int round, StopReason stop) {
  if (state_ == State::kFinished || round != round_.number) return;
  stop_ = std::move(stop);
  if (stop_->failure) noteFailure(*stop_->failure);
  if (!(stop_->kind == StopKind::kNodeLost && stop_->node == rendezvous_.nodeId())) {
    incidents_.stopped(*stop_, round, epochSeconds(loop_.wallNow()));
  }
  if (stop_->kind == StopKind::kDone) {
    // Every node's workers succeeded (the last one through the exit barrier said so).
    barrierTimer_.cancel();
    finish(Ending::succeeded());
    return;
  }
  if (stop_->kind == StopKind::kNodeLost && stop_->node == rendezvous_.nodeId()) {
    // The store counted this node lost (its hold lapsed or its connection closed) while it
    // still ran: its workers are a stale group now, as if the fence had fired.
    fenceNow(fmt::format("the rendezvous store at {} counted this node lost",
                         rendezvous_.storeAddress()));
    if (fenced_ || state_ == State::kFinished) return;
  }
  if (stop_->kind == StopKind::kNodeLeft && stop_->storeHost &&
      stop_->node != rendezvous_.nodeId()) {
    // The agent hosting the rendezvous store is leaving, and the store with it: a job re-formed
    // now would lose it moments later. Stop here, saying why.
    const std::string why = fmt::format(
        "ddprun: error: the agent hosting the rendezvous store ({}) was stopped by {} and takes "
        "the store with it: this node's workers are stopped and the job ends; to let a job "
        "outlive any one agent, run the store as ddprun-rendezvous on the endpoint",
        stop_->nodeText(), common::signalName(stop_->signal));
    endOnceStopped(Ending::storeLost(why), stopKindName(StopKind::kStoreLost));
    return;
  }
  if (state_ == State::kRunning || state_ == State::kLocalDone) {
    switch (stop_->kind) {
      case StopKind::kNodeLost:
        spdlog::warn("{} was lost; stopping this round to re-form the job", stop_->nodeText());
        break;
      case StopKind::kNodeJoined:
        spdlog::info("{} joins the job; re-forming", stop_->nodeText());
        break;
      case StopKind::kNodeLeft:
        spdlog::warn("{} left the job; re-forming", stop_->nodeText());
        break;
      default:
        break;
    }
    state_ = State::kStopping;
    barrierTimer_.cancel();
    stopWorkers(stopKindName(stop_->kind));
  }
  maybeRoundOver();
}

void AgentMachine::onStoreLost(const StoreLoss& loss) {
  if (state_ == State::kFinished || fenced_ || rejoinAfterStop_) return;
  if (loss.closedByHost) {
    incidents_.stopped(StopReason::storeLost(loss.detail), round_.number,
                       epochSeconds(loop_.wallNow()));
    // An answer, not silence: the store's side is gone, and nothing will come back there.
    const std::string why = fmt::format(
        "ddprun: error: lost the rendezvous store at {}: its host closed the connection (the "
        "agent hosting it exited, or ddprun-rendezvous stopped): {}; stopping this node's workers",
        rendezvous_.storeAddress(), common::printable(loss.detail));
    endOnceStopped(Ending::storeLost(why), stopKindName(StopKind::kStoreLost));
    return;
  }
  fenceNow(fmt::format("the rendezvous store at {} has not answered for {:.1f} s ({})",
                       rendezvous_.storeAddress(), silentSeconds(),
                       common::printable(loss.detail)));
}

void AgentMachine::endOnceStopped(Ending ending, std::string_view reason) {
  barrierTimer_.cancel();
  endAfterStop_ = std::move(ending);
  state_ = State::kStopping;
  stopWorkers(reason);
  maybeRoundOver();  // ends at once when no worker runs
}

void AgentMachine::onChildExited() {
  // Record every exit of the batch before judging the group: a successful exit reaped together
  // with a failed one must not make the node look done.
  bool anyExited = false;
  for (const ExitedWorker& exited : launcher_.reap()) {
    LocalWorker* worker = workerByPid(exited.pid);
    if (worker == nullptr) continue;
    worker->running = false;
    worker->waitStatus = exited.waitStatus;
    worker->exitedAt = epochSeconds(loop_.wallNow());
    anyExited = true;
    fileTimers_.forget(exited.pid);
    progress_.exited(worker->localRank, exitedZero(exited.waitStatus));
  }
  if (anyExited && state_ == State::kRunning) judgeWorkers();
  maybeRoundOver();
}

WorkerFailure AgentMachine::failureOf(const LocalWorker& worker) const {
  const WorkerIdentity who{worker.rank,        worker.localRank, round_.groupRank,
                           identity_.hostname, worker.pid,       worker.errorFile};
  WorkerFailure failure = fromWaitStatus(worker.waitStatus, who, worker.exitedAt);
  loadErrorFile(failure);
  failure.hang = worker.hang;
  failure.hangDetail = worker.hangDetail;
  failure.hungAt = worker.hungAt;
  failure.silentSince = worker.silentSince;
  failure.stack = worker.stack;
  failure.evidenceFile = worker.evidenceFile;
  failure.flightRecorderDump = worker.flightRecorderDump;
  failure.flightRecorderNote = worker.flightRecorderNote;
  failure.stderrTail = output_.stderrTail(worker.localRank);
  return failure;
}

void AgentMachine::judgeWorkers() {
  for (LocalWorker& worker : local_) {
    if (worker.running || worker.judged) continue;
    worker.judged = true;
    if (exitedZero(worker.waitStatus)) {
      emitWorkerEvent(worker, "SUCCEEDED");
      continue;
    }
    WorkerFailure failure = failureOf(worker);
    // A SIGKILL the agent did not send (it sends none while the round runs, except to hung
    // workers): the kernel's OOM killer, or somebody's kill -9.
    if (diagnostics_.oom && failure.signal == SIGKILL && worker.hang == HangKind::kNone) {
      failure.oom = diagnostics_.oom->explain(worker.pid);
    }
    emitWorkerEvent(worker, "FAILED", toJson(failure));
    spdlog::warn("worker {} (rank {}, pid {}) failed: {}", worker.localRank, worker.rank,
                 worker.pid, statusText(failure));
    worker.failed = true;
    noteFailure(failure);
    localFailures_.push_back(std::move(failure));
  }
  if (!localFailures_.empty()) {
    announceFailure();
    return;
  }
  if (std::any_of(local_.begin(), local_.end(), [](const LocalWorker& w) { return w.running; }))
    return;
  // Every local worker exited 0: count this node done; the last node announces "done".
  spdlog::debug("round {}: every local worker exited 0", round_.number);
  state_ = State::kLocalDone;
  rendezvous_.markDone(round_.number, round_.nodes);
  barrierTimer_.arm(config_.rdzv.settings.exitBarrierTimeout, [this] {
    if (state_ != State::kLocalDone) return;
    if (identity_.hostsStore) {
      // Leaving would take the store from under the nodes still at work and kill their workers.
      spdlog::warn(
          "not every node has finished after the exit barrier's timeout; this agent "
          "hosts the rendezvous store, so it stays until they finish or are lost");
      return;
    }
    spdlog::warn("the exit barrier timed out: not every node finished; exiting 0 as this node did");
    finish(Ending::succeeded());
  });
}

void AgentMachine::announceFailure() {
  // The earliest of this node's failures speaks for it; the store keeps the job's first.
  state_ = State::kStopping;
  WorkerFailure cause = localFailures_[rootCauseIndex(localFailures_)];
  cause.progress = roundMadeProgress();
  StopReason stop = StopReason::workerFailed(std::move(cause), rendezvous_.nodeId());
  // The node rule keeps the store's host (restart_policy.h): every agent reads it here.
  stop.storeHost = identity_.hostsStore;
  rendezvous_.announce(round_.number, std::move(stop));
  stopWorkers(stopKindName(StopKind::kWorkerFailed));
}

bool AgentMachine::roundMadeProgress() const {
  if (fileTimerRequests_) return true;
  if (diagnostics_.heartbeats) {
    for (const LocalWorker& worker : local_) {
      if (worker.pid >= 0 && diagnostics_.heartbeats->lastReport(worker.localRank)) return true;
    }
  }
  const auto minTime = config_.restart.progressMinTime;
  return minTime > std::chrono::milliseconds(0) && loop_.now() - roundStartedAt_ >= minTime;
}

void AgentMachine::stopWorkers(std::string_view reason) {
  progress_.stop();
  if (!launcher_.anyRunning()) return;
  // The notice first, complete before the signal: a worker that handles the signal by looking
  // at its stop file finds it there.
  if (diagnostics_.stopRequests && !stopFile_.empty()) {
    diagnostics_.stopRequests->request(reason, loop_.wallNow() + config_.restart.shutdownTimeout);
  }
  // The worker's own process only: its DataLoader workers (its process group) live on while it
  // saves, and end with it or at the deadline.
  launcher_.signalLeaders(signal_ != 0 ? signal_ : SIGTERM);
  stopDeadline_ = loop_.now() + config_.restart.shutdownTimeout;
  graceTimer_.arm(config_.restart.shutdownTimeout, [this] { onStopDeadline(); });
}

void AgentMachine::onStopDeadline() {
  drainGroups_ = false;
  if (launcher_.anyRunning()) {
    spdlog::warn(
        "workers still running {} ms after the stop signal: killing them and everything they "
        "started",
        config_.restart.shutdownTimeout.count());
    launcher_.signalAll(SIGKILL);
  } else if (launcher_.anyLeftBehind()) {
    spdlog::warn(
        "processes the workers left in their process groups still run {} ms after the stop "
        "signal: killing them",
        config_.restart.shutdownTimeout.count());
    launcher_.signalAll(SIGKILL);
  }
  maybeRoundOver();
}

void AgentMachine::maybeRoundOver() {
  if (state_ != State::kStopping || launcher_.anyRunning()) return;
  if (drainGroups_ && launcher_.anyLeftBehind()) {
    // Stopping for a signal from outside: a worker's leader may be a wrapper script that the
    // signal ended while the trainer it started still saves its checkpoint (told by its stop
    // file). Their exits come back to this subreaper (SIGCHLD); the deadline ends the wait.
    if (!saidLeftBehind_) {
      saidLeftBehind_ = true;
      spdlog::warn(
          "every worker has exited; waiting up to {:.1f} s (--shutdown-timeout) for the processes "
          "they left in their process groups to finish; a second signal kills them now",
          std::chrono::duration<double>(stopDeadline_ - loop_.now()).count());
    }
    return;
  }
  graceTimer_.cancel();
  if (endAfterStop_) {
    finish(std::move(*endAfterStop_));
    return;
  }
  if (signal_ != 0) {
    finish(Ending::signalled(signal_));
    return;
  }
  if (rejoinAfterStop_) {
    // Fenced on c10d or etcd: back as a new member (no restart is spent: a node coming back is
    // a membership change, as a late joiner is).
    fenceTimer_.reset();
    state_ = State::kJoining;
    output_.drain(kOutputGrace, [this] {
      if (state_ == State::kFinished) return;
      launcher_.killStrays();
      rejoinAfterStop_ = false;
      fenced_ = false;
      spdlog::warn("round {}: this node's workers are gone; rejoining the job as a new member",
                   round_.number);
      incidents_.decided(IncidentOutcome::kReformed, FailureClass::kMachine,
                         epochSeconds(loop_.wallNow()));
      joinedAt_ = loop_.now();
      rendezvous_.rejoin();
    });
    return;
  }
  if (!stop_) return;  // the stop's reason is still on its way (our announce, or another's)
  fenceTimer_.reset();
  state_ = State::kJoining;
  output_.drain(kOutputGrace, [this] { afterRound([this] { nextStep(); }); });
}

void AgentMachine::nextStep() {
  if (state_ == State::kFinished) return;  // a signal ended the agent while the logs drained
  launcher_.killStrays();
  const StopReason& stop = *stop_;
  const double now = epochSeconds(loop_.wallNow());
  if (stop.kind == StopKind::kNodeLost) lastFailureClass_ = FailureClass::kMachine;
  if (stop.kind == StopKind::kNodeLost || stop.kind == StopKind::kNodeLeft) {
    incidents_.decided(IncidentOutcome::kReformed, FailureClass::kMachine, now);
  }
  if (stop.kind == StopKind::kWorkerFailed) {
    const RoundShape shape{.elastic = elastic(),
                           .nodes = round_.nodes,
                           .minNodes = config_.rdzv.minNodes,
                           .spares = config_.rdzv.spares};
    const RestartDecision decision = decideRestart(round_.history, stop, config_.restart, shape);
    lastFailureClass_ = decision.failureClass;
    if (!decision.restart()) {
      incidents_.decided(IncidentOutcome::kJobFailed, decision.failureClass, now);
      failJob(stop, decision);
      return;
    }
    ++metrics_.restarts[decision.failureClass];
    incidents_.decided(IncidentOutcome::kRestarted, decision.failureClass, now);
    if (decision.node != NodeTrust::kTrusted) {
      const std::string text = nodeTrustText(decision, stop, config_.restart, shape);
      if (decision.node == NodeTrust::kLeaves && stop.node == rendezvous_.nodeId()) {
        leaveUntrusted(stop, decision, text);
        return;
      }
      spdlog::warn("round {}: {}", round_.number, text);
      if (decision.node == NodeTrust::kLeaves) emitLeftOut(stop, decision, text, "RESTARTING");
    }
    const WorkerFailure& cause = *stop.failure;
    const int restarts = decision.history.restarts;
    spdlog::warn(
        "restarting the job (restart {} of {}) after rank {} on {} failed: {} ({} failure, {})",
        restarts, config_.restart.maxRestarts, cause.rank, shown(cause.host), statusText(cause),
        failureClassName(decision.failureClass),
        cause.progress ? "after progress"
                       : fmt::format("{} in a row without progress", decision.history.noProgress));
    const double wait = std::chrono::duration<double>(decision.backoff).count();
    if (diagnostics_.event) {
      WorkerEvent event = agentEvent("ddprun.worker_group.restart", "RESTARTING");
      event.restarts = restarts;
      event.rawError = toJson(cause);
      event.extra = {{"failure_class", failureClassName(decision.failureClass)},
                     {"progress", cause.progress},
                     {"backoff_s", wait}};
      diagnostics_.event(eventLine(event));
    }
    if (decision.backoff > std::chrono::milliseconds(0)) {
      spdlog::warn("restart {} in {:.1f} s (back-off: {} failure(s) in a row without progress)",
                   restarts, wait, std::max(1, decision.history.noProgress));
      restartAt_ = epochSeconds(loop_.wallNow()) + wait;
      backoffTimer_.arm(decision.backoff, [this] {
        restartAt_.reset();
        if (state_ != State::kJoining) return;
        joinRound(round_.number + 1);
      });
      return;
    }
  }
  joinRound(round_.number + 1);
}

void AgentMachine::leaveUntrusted(const StopReason& stop, const RestartDecision& decision,
                                  const std::string& text) {
  // The others re-form without this node as soon as its hold goes, which its end gives up (the
  // agent's leave): nobody waits for it.
  spdlog::warn("round {}: this node is left out of the job: {}", round_.number, text);
  leftOut_ = text;
  emitLeftOut(stop, decision, text, "FAILED");
  finish(Ending::jobFailed(
      *stop.failure,
      fmt::format("ddprun: error: this node is left out of the job after {} failure(s) in a row "
                  "here: {}; machine failure",
                  decision.history.causeStreak, common::printable(statusText(*stop.failure))),
      FailureClass::kMachine));
}

void AgentMachine::emitLeftOut(const StopReason& stop, const RestartDecision& decision,
                               const std::string& text, const char* state) const {
  if (!diagnostics_.event) return;
  WorkerEvent event = agentEvent("ddprun.node.left_out", state);
  event.restarts = decision.history.restarts;
  event.rawError = toJson(*stop.failure);
  event.extra = {{"failure_class", failureClassName(decision.failureClass)},
                 {"node", stop.node},
                 {"host", common::validUtf8(stop.host)},
                 {"reason", text}};
  diagnostics_.event(eventLine(event));
}

void AgentMachine::printMissingModuleHint(const WorkerFailure& cause) {
  const auto pythonExec = identity_.environment.find("PYTHON_EXEC");
  const Interpreter interpreter{
      .path = config_.entry.python,
      .fromPythonExec = pythonExec != identity_.environment.end() && !pythonExec->second.empty()};
  std::optional<std::string> evidence;
  if (const auto line = missingModuleLine(cause)) {
    evidence = fmt::format("rank {} failed with \"{}\"", cause.rank, *line);
  } else if (cause.stderrTail.empty() && !cause.progress && cause.signal == 0 &&
             cause.host == identity_.hostname && config_.entry.kind == EntryKind::kPythonScript) {
    // Its output went to the console unseen: ask the interpreter about the script's imports.
    if (const auto module =
            unimportableModule(interpreter, config_.entry.script, identity_.environment)) {
      evidence = fmt::format(
          "rank {} exited {} before any progress; {} imports {}, which it "
          "cannot find",
          cause.rank, cause.exitCode, config_.entry.script, *module);
    }
  }
  if (evidence) printError("ddprun: hint: " + interpreterHint(*evidence, interpreter) + "\n");
}

void AgentMachine::failJob(const StopReason& stop, const RestartDecision& decision) {
  // The root cause is the job's first failure (from the stop key, the same on every node); this
  // node's other failures of the round are listed with it.
  std::vector<WorkerFailure> failures{*stop.failure};
  for (const WorkerFailure& mine : localFailures_) {
    if (mine.rank != failures.front().rank || mine.host != failures.front().host)
      failures.push_back(mine);
  }
  // This node's workers' output is drained by now: their stderr tails are complete.
  for (WorkerFailure& failure : failures) {
    if (failure.host == identity_.hostname && failure.groupRank == round_.groupRank &&
        failure.localRank >= 0 && failure.localRank < config_.nprocPerNode) {
      if (auto tail = output_.stderrTail(failure.localRank); !tail.empty())
        failure.stderrTail = std::move(tail);
    }
  }
  const WorkerFailure& cause = failures.front();
  printError(formatSummary(config_.entry.script, failures, /*rootCause=*/0) + "\n");
  if (config_.entry.kind != EntryKind::kExecutable) printMissingModuleHint(cause);
  if (auto parent = identity_.environment.find(common::kEnvTorchelasticErrorFile);
      parent != identity_.environment.end()) {
    try {
      propagateErrorFile(cause, parent->second);
    } catch (const std::exception& error) {
      spdlog::warn("cannot write the error file for the parent: {}", error.what());
    }
  }
  std::string why = statusText(cause);
  if (cause.hang == HangKind::kFailPattern)
    why = "failed: " + cause.hangDetail;
  else if (cause.hang != HangKind::kNone)
    why = "hung: " + cause.hangDetail;
  if (!cause.oom.empty()) why += "; " + cause.oom;
  const std::string reason = decision.text(config_.restart);
  spdlog::warn("not restarting: {} ({} failure)", common::printable(reason),
               failureClassName(decision.failureClass));
  if (diagnostics_.event) {
    WorkerEvent event = agentEvent("ddprun.job.failed", "FAILED");
    event.rawError = toJson(cause);
    event.extra = {{"failure_class", failureClassName(decision.failureClass)}, {"reason", reason}};
    diagnostics_.event(eventLine(event));
  }
  // The cause may be another node's, read from the stop record: its host and details (the
  // signature in the reason too) are escaped here, where they become the line.
  finish(Ending::jobFailed(
      cause,
      fmt::format("ddprun: error: the job failed after {} restart(s): rank {} on {}: {}; {} "
                  "failure: {}",
                  round_.history.restarts, cause.rank, shown(cause.host), common::printable(why),
                  failureClassName(decision.failureClass), common::printable(reason)),
      decision.failureClass));
}

void AgentMachine::onSignal(int signal) {
  if (state_ == State::kFinished) return;
  if (signal_ != 0) {
    // A second signal: no more patience.
    drainGroups_ = false;
    launcher_.signalAll(SIGKILL);
    maybeRoundOver();
    return;
  }
  signal_ = signal;
  if (state_ != State::kJoining && state_ != State::kIdle) {
    rendezvous_.announce(round_.number,
                         StopReason::nodeLeft(rendezvous_.nodeId(), round_.groupRank,
                                              identity_.hostname, signal, identity_.hostsStore));
  }
  if (state_ == State::kJoining || state_ == State::kIdle || !launcher_.anyRunning()) {
    spdlog::warn("received {}: no worker runs; ending", common::signalName(signal));
    finish(Ending::signalled(signal));
    return;
  }
  spdlog::warn(
      "received {}: asking the workers to stop (their {}, then {} to each worker's own process); "
      "what is left of them at --shutdown-timeout's deadline ({:.1f} s) is killed",
      common::signalName(signal), common::kEnvDdprunStopFile, common::signalName(signal),
      std::chrono::duration<double>(config_.restart.shutdownTimeout).count());
  state_ = State::kStopping;
  drainGroups_ = true;
  stopWorkers(common::signalName(signal));
}

void AgentMachine::onSuspend(int signal) {
  if (state_ == State::kFinished || suspendedAt_) return;
  suspendedAt_ = loop_.now();
  // The workers run in sessions of their own, so the terminal's Ctrl-Z reaches none of them:
  // every worker's process group is stopped here (and what exited workers left behind), with
  // SIGSTOP, which no worker can catch or ignore, as the terminal would have stopped them.
  spdlog::info(
      "received {}: stopping every worker and the agent until the job is continued "
      "(fg, bg or SIGCONT)",
      common::signalName(signal));
  launcher_.signalAll(SIGSTOP);
  fenceTimer_.reset();  // looked at again on resume
  // A stopped job is neither hung nor slow to exit: no timeout of this agent counts while it is
  // stopped. (The other nodes' view is theirs: a node stopped for longer than the rendezvous's
  // keep-alive allows is lost to them, and they re-form without it; docs/env_contract.md.)
  progress_.pause();
  fileTimers_.pause();
  graceTimer_.pause();
  barrierTimer_.pause();
  backoffTimer_.pause();
  cooldownTimer_.pause();
}

void AgentMachine::onResume() {
  if (!suspendedAt_) return;
  const auto stopped = std::chrono::duration<double>(loop_.now() - *suspendedAt_).count();
  suspendedAt_.reset();
  if (state_ == State::kFinished) return;
  if (identity_.hostsStore) {
    // The store stopped with this agent and gives every hold the stopped time back (its stall
    // rule): the fence starts afresh too.
    fenceFrom_ = loop_.now();
  } else if (!fenced_ &&
             silentSeconds() * 1000 >= config_.rdzv.settings.fencingInterval().count()) {
    // A store elsewhere kept counting: the others may have re-formed meanwhile. Fenced before
    // the workers run another instruction.
    checkFence();
  }
  launcher_.signalAll(SIGCONT);
  spdlog::info(
      "the job continues after {:.1f} s stopped: the hang and exit timeouts start afresh, "
      "FileTimer deadlines and the agent's own timeouts are moved on by that time",
      stopped);
  progress_.resume();
  fileTimers_.resume();
  graceTimer_.resume();
  barrierTimer_.resume();
  backoffTimer_.resume();
  cooldownTimer_.resume();
  armFence();
}

void AgentMachine::onConsoleClosed() {
  if (state_ == State::kFinished || endAfterStop_) return;
  // Workers that inherited the console would die of SIGPIPE now (torchrun's do): stop them.
  endOnceStopped(
      Ending::consoleClosed("ddprun: error: ddprun's output was closed by its reader (e.g. `| "
                            "head`); stopping the workers"),
      "console_closed");
}

void AgentMachine::finish(Ending ending) {
  if (state_ == State::kFinished) return;
  state_ = State::kFinished;
  const int code = exitCode(ending, config_.restart.exitCodes);
  if (ending.kind != EndKind::kSucceeded && ending.kind != EndKind::kConsoleClosed)
    lastFailureClass_ = ending.failureClass;
  spdlog::debug("finishing with exit code {}", code);
  if (!ending.message.empty()) printError(ending.message + "\n");
  incidents_.finished(epochSeconds(loop_.wallNow()),
                      ending.kind == EndKind::kSucceeded || ending.kind == EndKind::kConsoleClosed
                          ? std::nullopt
                          : std::optional(ending.failureClass));
  progressWatch_.reset();
  ending_ = std::move(ending);
  graceTimer_.cancel();
  barrierTimer_.cancel();
  backoffTimer_.cancel();
  restartAt_.reset();
  cooldownTimer_.cancel();
  healthRetryAt_.reset();
  fenceTimer_.reset();
  progress_.stop();
  fileTimers_.clear();
  fileTimerRefusals_.flush();
  launcher_.killAll();
  launcher_.killStrays();
  // A check in flight is of no use now: its hook is killed. The last round's post-round hook
  // runs unless a signal ends the agent.
  HealthGate* health = diagnostics_.health;
  if (health != nullptr && gateRunning_) health->cancel();
  const bool postRound = health != nullptr && !gateRunning_ && formed_ && signal_ == 0 &&
                         postRoundRan_ != round_.number;
  if (postRound) postRoundRan_ = round_.number;
  // Every line the workers wrote reaches the console before the agent goes.
  output_.drain(kOutputGrace, [this, code, postRound, health] {
    if (!postRound) {
      finished_(code);
      return;
    }
    health->afterRound(round_.number, [this, code] { finished_(code); });
  });
}

void AgentMachine::onFileTimerLine(std::string_view line) {
  if (state_ == State::kFinished) return;
  if (state_ == State::kRunning) fileTimerRequests_ = true;  // progress evidence
  fileTimers_.onLine(line);
}

AgentMachine::LocalWorker* AgentMachine::workerByPid(pid_t pid) {
  auto worker = std::find_if(local_.begin(), local_.end(),
                             [&](const LocalWorker& w) { return w.pid == pid; });
  return worker == local_.end() ? nullptr : &*worker;
}

void AgentMachine::onFileTimerExpired(const FileTimerExpiry& expiry) {
  // The scope id is the worker's text, kept raw in the detail (it travels in the failure's JSON);
  // every line that shows the detail escapes it.
  const std::string detail = fmt::format(
      "its FileTimer \"{}\" expired (torch's FileTimerClient asked "
      "for {} then)",
      expiry.scopeId, common::signalName(expiry.signal));
  LocalWorker* worker = workerByPid(expiry.pid);
  if (worker != nullptr && worker->running && state_ == State::kRunning) {
    onHung(worker->localRank, HangKind::kFileTimer, detail, expiry.signal);
    return;
  }
  // torch's server sends the signal to whatever pid the request names, and any process that can
  // open the pipe (every worker) writes requests: a root `sleep`, the agent itself. Only the job's
  // own processes are signalled here: a worker, or a process one started (torch's client names
  // the process that asks, which may be a worker's child).
  if (!launcher_.belongsToWorkers(expiry.pid)) {
    fileTimerRefusals_.refused(expiry);
    return;
  }
  // A worker's descendant, or a worker the round is stopping anyway: the signal only, as torch's
  // server does.
  spdlog::warn("process {}: {}; sending it {}", expiry.pid, common::printable(detail),
               common::signalName(expiry.signal));
  launcher_.signalProcess(expiry.pid, expiry.signal);
}

void AgentMachine::onHung(int localRank, HangKind kind, std::string detail, int signal) {
  if (state_ != State::kRunning || localRank < 0 || localRank >= static_cast<int>(local_.size()))
    return;
  LocalWorker& worker = local_[localRank];
  if (!worker.running || worker.hang != HangKind::kNone) return;
  worker.hang = kind;
  worker.hangDetail = fmt::format("{}; killed with {}", detail, common::signalName(signal));
  worker.hungAt = epochSeconds(loop_.wallNow());
  if (kind == HangKind::kNoProgress || kind == HangKind::kNoFirstProgress) {
    const auto report =
        diagnostics_.heartbeats ? diagnostics_.heartbeats->lastReport(localRank) : std::nullopt;
    worker.silentSince = report ? epochSeconds(*report) : worker.startedAt;
  } else if (kind == HangKind::kNoStart) {
    worker.silentSince = worker.startedAt;  // no --start-pattern line since its start
  }
  spdlog::warn(
      "worker {} (rank {}, pid {}) {}: {}; recording where its threads are, then "
      "sending it {}",
      worker.localRank, worker.rank, worker.pid,
      kind == HangKind::kFailPattern ? "failed" : "is hung", common::printable(detail),
      common::signalName(signal));
  if (kind != HangKind::kFailPattern) {  // a failing line's worker gets its FAILED event on exit
    emitWorkerEvent(worker, "UNHEALTHY", nullptr,
                    {{"hang", hangKindName(kind)}, {"detail", detail}});
  }
  const pid_t pid = worker.pid;
  if (diagnostics_.evidence == nullptr) {
    launcher_.signalProcess(pid, signal);
    return;
  }
  // Ranks found hung together (a collective every peer waits in) are recorded together: no hung
  // worker is signalled before every pending collection is in, since the first death restarts
  // the group and would stop the others before their stacks were taken. The wait is the
  // collections' budget, which they spend in parallel.
  worker.evidencePending = true;
  worker.hangSignal = signal;
  const std::string saveTo = fmt::format(
      "{}/stacks_{}.txt", rankDirectory(attemptDirectory(round_.number), localRank), pid);
  auto collected = [this, pid](HangEvidence evidence) {
    LocalWorker* hung = workerByPid(pid);
    if (hung == nullptr) return;  // a later round's workers are running now
    hung->evidencePending = false;
    keepEvidence(*hung, evidence);
    signalHungWorkers();
  };
  diagnostics_.evidence->collect(pid, saveTo, worker.flightRecorder, std::move(collected));
}

void AgentMachine::onFailLine(int localRank, std::string detail) {
  // A failure the user's rule declared, stopped as a hung worker is (its stacks, then SIGKILL):
  // the worker may go on printing or block, and the group must not wait for it.
  onHung(localRank, HangKind::kFailPattern, std::move(detail), SIGKILL);
}

void AgentMachine::signalHungWorkers() {
  const bool pending = std::any_of(local_.begin(), local_.end(),
                                   [](const LocalWorker& w) { return w.evidencePending; });
  if (pending) return;
  for (LocalWorker& worker : local_) {
    // Still running (a stop may have ended it meanwhile): now the signal, once.
    if (worker.hangSignal == 0 || !worker.running) continue;
    launcher_.signalProcess(worker.pid, worker.hangSignal);
    worker.hangSignal = 0;
  }
}

void AgentMachine::keepEvidence(LocalWorker& worker, const HangEvidence& evidence) {
  const int localRank = worker.localRank;
  worker.stack = evidence.summary(kSummaryStackLines);
  if (!evidence.savedTo.empty()) {
    worker.evidenceFile = evidence.savedTo;
    spdlog::warn("worker {} (rank {}): its threads' stacks are in {}", localRank, worker.rank,
                 evidence.savedTo);
  } else {
    spdlog::warn(
        "cannot write the stacks of worker {} (rank {}): {}", localRank, worker.rank,
        evidence.notes.empty() ? std::string("no file") : common::printable(evidence.notes.back()));
  }
  if (evidence.flightRecorder) {
    const FlightRecorderDump& dump = *evidence.flightRecorder;
    worker.flightRecorderDump = dump.file;
    std::string note;
    for (const std::string& line : dump.notes) note += (note.empty() ? "" : "; ") + line;
    worker.flightRecorderNote = note;
    for (const std::string& line : flightRecorderSummary(dump))
      spdlog::warn("worker {} (rank {}): {}", localRank, worker.rank, common::printable(line));
  }
  // The worker's own stacks: its thread names, file names and frames are its to choose.
  for (const std::string& line : worker.stack)
    spdlog::warn("  rank {}: {}", worker.rank, common::printable(line));
}

WorkerEvent AgentMachine::agentEvent(std::string name, const char* state) const {
  WorkerEvent event;
  event.name = std::move(name);
  event.source = "AGENT";
  event.timestamp = epochSeconds(loop_.wallNow());
  event.runId = config_.rdzv.runId;
  event.groupRank = round_.groupRank;
  event.role = config_.role;
  event.hostname = identity_.hostname;
  event.state = state;
  event.totalRunTime = event.timestamp - startedAt_;
  event.rdzvBackend = rdzvBackendName(config_.rdzv.backend);
  event.restarts = round_.history.restarts;
  return event;
}

void AgentMachine::emitWorkerEvent(const LocalWorker& worker, const char* state,
                                   nlohmann::json rawError, nlohmann::json extra) const {
  if (!diagnostics_.event) return;
  WorkerEvent event = agentEvent(fmt::format("torchelastic.worker.status.{}", state), state);
  event.source = "WORKER";
  event.rank = worker.rank;
  event.pid = worker.pid;
  event.localRank = worker.localRank;
  event.rawError = std::move(rawError);
  event.extra = std::move(extra);
  diagnostics_.event(eventLine(event));
}

void AgentMachine::printError(std::string text) const {
  if (identity_.printError) {
    identity_.printError(std::move(text));
  } else {
    std::fputs(text.c_str(), stderr);
  }
}

void AgentMachine::noteFailure(const WorkerFailure& failure) { lastFailure_ = failure; }

void AgentMachine::watchFirstProgress() {
  progressWatch_.reset();
  const auto since = incidents_.awaitingProgressSince();
  if (!since || diagnostics_.heartbeats == nullptr || state_ != State::kRunning) return;
  std::optional<double> first;
  for (const LocalWorker& worker : local_) {
    if (worker.pid < 0) continue;
    const auto report = diagnostics_.heartbeats->lastReport(worker.localRank);
    if (!report) continue;
    const double at = epochSeconds(*report);
    if (at >= *since && (!first || at < *first)) first = at;
  }
  if (first) {
    incidents_.progressed(*first);
    return;
  }
  progressWatch_ = loop_.after(kProgressLook, [this] { watchFirstProgress(); });
}

void AgentMachine::onIncidentClosed(const Incident& incident) {
  spdlog::info("incident: {}", incidentText(incident));
  if (!diagnostics_.event) return;
  WorkerEvent event = agentEvent("ddprun.incident", "INCIDENT");
  event.extra = toJson(incident);
  diagnostics_.event(eventLine(event));
}

AgentSnapshot AgentMachine::snapshot() const {
  AgentSnapshot snapshot;
  snapshot.runId = config_.rdzv.runId;
  snapshot.maxRestarts = config_.restart.maxRestarts;
  snapshot.address = identity_.address;
  snapshot.hostname = identity_.hostname;
  snapshot.agentPid = static_cast<long>(::getpid());
  snapshot.lastFailure = lastFailure_;
  if (ending_) snapshot.exitCode = exitCode(*ending_, config_.restart.exitCodes);
  snapshot.lastFailureClass = lastFailureClass_;
  snapshot.leftOut = leftOut_;
  snapshot.spare = state_ == State::kJoining && rendezvous_.waitingForPlace();
  snapshot.sparesWanted = config_.rdzv.spares;
  snapshot.restartAt = restartAt_;
  snapshot.exclusions = exclusions_;
  snapshot.lastExclusion = lastExclusion_;
  snapshot.healthRetryAt = healthRetryAt_;
  snapshot.startedAt = startedAt_;
  snapshot.updatedAt = epochSeconds(loop_.wallNow());
  snapshot.incidents.assign(incidents_.recent().begin(), incidents_.recent().end());
  switch (state_) {
    case State::kIdle:
    case State::kJoining:
      snapshot.phase = AgentPhase::kJoining;
      break;
    case State::kRunning:
      snapshot.phase = AgentPhase::kRunning;
      break;
    case State::kLocalDone:
      snapshot.phase = AgentPhase::kLocalDone;
      break;
    case State::kStopping:
      snapshot.phase = AgentPhase::kStopping;
      break;
    case State::kFinished:
      snapshot.phase = AgentPhase::kFinished;
      break;
  }
  if (!formed_) return snapshot;
  snapshot.round = round_.number;
  snapshot.restarts = round_.history.restarts;
  snapshot.groupRank = round_.groupRank;
  snapshot.nodes = round_.nodes;
  // While joining the next round, the workers listed are the last round's, as they ended.
  for (const LocalWorker& worker : local_) {
    WorkerSnapshot shown;
    shown.rank = worker.rank;
    shown.localRank = worker.localRank;
    shown.pid = worker.pid;
    shown.startedAt = worker.startedAt;
    if (worker.running) {
      // A --fail-pattern line's worker is being stopped as failed, not hung: /healthz stays 200
      // for it (the job's failure is the user's, which a probe's restart would not mend).
      shown.state = worker.hang == HangKind::kNone          ? WorkerState::kRunning
                    : worker.hang == HangKind::kFailPattern ? WorkerState::kFailed
                                                            : WorkerState::kHung;
    } else if (worker.pid < 0 || worker.failed || worker.hang != HangKind::kNone) {
      shown.state = WorkerState::kFailed;
    } else if (exitedZero(worker.waitStatus)) {
      shown.state = WorkerState::kSucceeded;
    } else {
      shown.state = WorkerState::kStopped;  // ended by the agent's stop, not judged a failure
    }
    if (!worker.running && worker.pid >= 0) {
      shown.exitCode = shellExitCode(worker.waitStatus);
    }
    if (diagnostics_.heartbeats && worker.running) {
      if (const auto report = diagnostics_.heartbeats->lastReport(worker.localRank)) {
        shown.lastHeartbeat = epochSeconds(*report);
      }
    }
    snapshot.workers.push_back(shown);
  }
  return snapshot;
}

}  // namespace ddprun::launcher
