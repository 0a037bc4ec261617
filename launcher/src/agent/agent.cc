// The real agent: the AgentMachine (machine/agent_machine.h) wired to Boost.Asio (the event loop,
// the signals, the workers' pipes), POSIX processes, the TCP store and the stores this agent may
// host. Everything that decides is in the machine; this file only builds and connects, in three
// steps: the run's directories (run_directories.h), the job's security and the stores
// (stores/store_backends.h, stores/hosted_stores.h), then the machine and its seams, run to the
// end.
#include "ddprun/launcher/agent.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "agent/asio_event_loop.h"
#include "agent/health_endpoint.h"
#include "agent/relay_handoff.h"
#include "agent/run_directories.h"
#include "agent/startup_error.h"
#include "agent/status_feed.h"
#include "agent/stdin_reader.h"
#include "core/exit_codes.h"
#include "ddprun/common/descriptor_limit.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/text.h"
#include "ddprun/common/worker_env_names.h"
#include "ddprun/rendezvous/security_options.h"
#include "hang/file_timer_pipe.h"
#include "hang/hang_evidence.h"
#include "hang/line_progress.h"
#include "hang/oom.h"
#include "hang/progress_monitor.h"
#include "hang/python_stack_hook.h"
#include "hang/worker_activity.h"
#include "health/node_health_gate.h"
#include "machine/agent_machine.h"
#include "membership/membership_driver.h"
#include "membership/solo_rendezvous.h"
#include "membership/status_publisher.h"
#include "output/agent_log.h"
#include "output/console_writer.h"
#include "output/log_router.h"
#include "placement/numa_plan.h"
#include "placement/numa_topology.h"
#include "process/guardian.h"
#include "process/posix_launcher.h"
#include "process/stop_files.h"
#include "process/worker_env.h"
#include "stores/hosted_stores.h"
#include "stores/store_backends.h"

namespace ddprun::launcher {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Environment = std::map<std::string, std::string>;

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

LogRouterOptions logOptions(const LaunchConfig& config, const AgentIdentity& identity) {
  LogRouterOptions options;
  options.role = config.role;
  if (auto it = identity.environment.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
      it != identity.environment.end()) {
    options.prefixTemplate = it->second;  // "" too: no prefix at all
  }
  // --log-time: the time before the prefix in force, unless its template places it already.
  if (config.logs.time) {
    const std::string given = options.prefixTemplate.value_or("[${role_name}${local_rank}]:");
    if (given.find("${time}") == std::string::npos) options.prefixTemplate = "${time} " + given;
  }
  // Line patterns need every line through the agent (the router then never passes through);
  // one worker per node still shows its lines bare, as passed through.
  options.passThrough = config.nprocPerNode == 1 && !options.prefixTemplate;
  if (options.passThrough && config.hang.anyLinePattern()) {
    options.passThrough = false;
    options.prefixTemplate = "";
  }
  options.terminalStdout = ::isatty(STDOUT_FILENO) == 1;
  options.hostname = identity.hostname;
  options.redirects = config.logs.redirects;
  options.tee = config.logs.tee;
  options.localRanksFilter = config.logs.localRanksFilter;
  options.duplicateStdoutFilters = config.logs.duplicateStdoutFilters;
  options.duplicateStderrFilters = config.logs.duplicateStderrFilters;
  return options;
}

// How a hung worker's stacks are taken: the Python stack hook (installed into the private
// directory, its dumps there too, and put first on the workers' PYTHONPATH) and a debugger.
EvidenceOptions evidenceOptions(const std::string& privateDir, AgentIdentity& identity,
                                std::chrono::milliseconds nativeStackBudget) {
  EvidenceOptions options;
  options.debuggerBudget = nativeStackBudget;
  // The Flight Recorder's dump is waited for no longer than the stacks may take.
  options.flightRecorderWait = options.pythonWait + nativeStackBudget;
  try {
    const PythonStackHook hook = installPythonStackHook(privateDir);
    addPythonStackHook(hook, identity.environment);
    options.pythonStackDir = hook.stackDir;
    options.pythonStackSignal = hook.signal;
  } catch (const std::exception& error) {
    spdlog::warn("hung Python workers will be reported without their Python stacks: {}",
                 error.what());
  }
  // A native backtrace within the budget (0: none): eu-stack when installed (milliseconds), else
  // gdb (seconds on a process that loaded libtorch); DDPRUN_HANG_DEBUGGER names another, or ""
  // for none.
  const Environment& environment = identity.environment;
  if (nativeStackBudget.count() <= 0) {
    options.debugger = "";
  } else if (auto debugger = environment.find("DDPRUN_HANG_DEBUGGER");
             debugger != environment.end()) {
    options.debugger = debugger->second.empty()
                           ? ""
                           : common::findExecutable(debugger->second, environment).value_or("");
  } else if (auto euStack = common::findExecutable("eu-stack", environment)) {
    options.debugger = *euStack;
  } else {
    options.debugger = common::findExecutable("gdb", environment).value_or("");
  }
  return options;
}

// torch's FileTimer watchdog (torchrun starts its FileTimerServer on the same variables): the
// pipe's path, exported to the workers, or "" when it is not enabled.
std::string fileTimerPath(const std::string& privateDir, AgentIdentity& identity) {
  Environment& environment = identity.environment;
  const auto enabled = environment.find(common::kEnvTorchelasticEnableFileTimer);
  if (enabled == environment.end() || enabled->second != "1") return "";
  const auto given = environment.find(common::kEnvTorchelasticTimerFile);
  // Absolute, as every path the workers get: a worker that changes directory still finds it.
  std::error_code ignored;
  const std::string path = given != environment.end() && !given->second.empty()
                               ? fs::absolute(given->second, ignored).lexically_normal().string()
                               : (fs::path(privateDir) / "watchdog_timer").string();
  environment[common::kEnvTorchelasticTimerFile] = path;
  return path;
}

// How long the ssh driver's token line may take to come (--token-from-stdin): it is written
// before the connection is made, so it comes with the session; this bounds a stdin that never
// gives one.
constexpr std::chrono::seconds kTokenLineWait{30};

// How this agent reaches the job's stores (the token `given` on stdin, or the job's token file),
// read once for every store it hosts or reaches.
StoreAccess loadStoreAccess(const RendezvousConfig& config,
                            std::optional<rendezvous::JobSecret> given) {
  try {
    return storeAccess(config, std::move(given));
  } catch (const StoreBackendError& error) {
    throw StartupError(error.what());
  }
}

// Who this agent is: its host, the environment its workers inherit, the marker that tags them
// (the guardian kills whatever carries it if the agent dies), and where their files go.
AgentIdentity identityOf(const Environment& environment, const RunDirectories& directories,
                         Guardian* guardian) {
  AgentIdentity identity;
  identity.hostname = hostName();
  identity.environment = environment;
  identity.agentMarker = fmt::format("{}-{}", ::getpid(), common::randomHexId());
  if (guardian)
    guardian->killHoldersOf(fmt::format("{}={}", common::kEnvDdprunAgent, identity.agentMarker));
  identity.scratchDir = directories.scratchDir();
  identity.logRunDir = directories.logRunDir();
  identity.privateDir = directories.privateDir();
  return identity;
}

// torch's FileTimer pipe at `path`, its lines to the machine; nothing when `path` is "".
std::unique_ptr<FileTimerPipe> serveFileTimers(asio::io_context& io, const std::string& path,
                                               AgentMachine& machine) {
  if (path.empty()) return nullptr;
  try {
    auto pipe = std::make_unique<FileTimerPipe>(
        io, path, [&machine](std::string_view line) { machine.onFileTimerLine(line); });
    spdlog::info("serving torch's FileTimer requests on {}", path);
    return pipe;
  } catch (const std::exception& error) {
    throw StartupError(fmt::format("{}; set {} to a path in a writable directory, or unset {}",
                                   error.what(), common::kEnvTorchelasticTimerFile,
                                   common::kEnvTorchelasticEnableFileTimer));
  }
}

// This node as the others will see it.
NodeInfo selfNode(const LaunchConfig& config, const AgentIdentity& identity) {
  NodeInfo self;
  self.address = identity.address;
  self.hostname = identity.hostname;
  self.nproc = config.nprocPerNode;
  self.pid = ::getpid();
  self.staticRank = config.rdzv.backend == RdzvBackend::kStatic ? config.rdzv.nodeRank : -1;
  return self;
}

// What the health gate knows of this node: who it is, where it writes, the GPUs it sees.
NodeHealthFacts healthFactsOf(const LaunchConfig& config, const AgentIdentity& identity) {
  NodeHealthFacts facts;
  facts.hostname = identity.hostname;
  facts.address = identity.address;
  facts.runId = config.rdzv.runId;
  facts.agentMarker = identity.agentMarker;
  facts.logDir = identity.logRunDir.empty() ? config.logs.dir : identity.logRunDir;
  facts.environment = identity.environment;
  if (const auto tmp = identity.environment.find("TMPDIR"); tmp != identity.environment.end())
    facts.tmpDir = tmp->second;
  if (const auto mask = identity.environment.find("CUDA_VISIBLE_DEVICES");
      mask != identity.environment.end()) {
    facts.cudaVisibleDevices = mask->second;
  }
  return facts;
}

// What tells the machine about the workers beyond their exit statuses (docs/architecture.md,
// WorkerDiagnostics): the heartbeat files, the evidence collector, the OOM witness and the
// activity sampler, with the event log's callback; and the stop files (DDPRUN_STOP_FILE).
class AgentDiagnostics {
 public:
  AgentDiagnostics(const fs::path& privateDir, AgentIdentity& identity, EventLoop& loop,
                   const std::string& cgroupPath, std::chrono::milliseconds nativeStackBudget)
      : heartbeats_(privateDir.string()),
        stopFiles_(privateDir.string()),
        evidence_(makeThreadedEvidenceCollector(
            loop, evidenceOptions(privateDir.string(), identity, nativeStackBudget))),
        oom_(cgroupPath) {}

  // The first attempt's heartbeat files, made on a thread of their own meanwhile (each is an
  // inode: the costly part of preparing a worker). A directory that is not the agent's own
  // shows when a worker is prepared.
  void prepareAhead(int nproc) {
    try {
      heartbeats_.prepareAhead(nproc);
    } catch (const std::system_error&) {
    }
  }

  WorkerDiagnostics seams(const LaunchConfig& config,
                          const std::shared_ptr<ConsoleWriter>& errWriter) {
    WorkerDiagnostics diagnostics;
    diagnostics.heartbeats = &heartbeats_;
    diagnostics.evidence = evidence_.get();
    diagnostics.oom = &oom_;
    diagnostics.activity = &activity_;
    diagnostics.stopRequests = &stopFiles_;
    if (config.eventLogHandler == "console") {
      diagnostics.event = [errWriter](std::string line) { errWriter->write(std::move(line)); };
    }
    return diagnostics;
  }

 private:
  HeartbeatFiles heartbeats_;
  StopFiles stopFiles_;
  std::unique_ptr<EvidenceCollector> evidence_;
  KernelOomWitness oom_;
  ProcActivity activity_;
};

// The job-control signals that stop a process: Ctrl-Z (SIGTSTP), a background job reading from or
// writing to the terminal (SIGTTIN, SIGTTOU).
bool isStopSignal(int signal) {
  return signal == SIGTSTP || signal == SIGTTIN || signal == SIGTTOU;
}

// Stops this process as `signal` would have without a handler, so that the shell sees the job
// stopped by it ("Stopped", "Stopped (tty output)"), and returns once it is continued. Asio's
// handler is set aside meanwhile and put back after. In an orphaned process group the kernel
// discards such a signal instead: then this returns at once, and the job goes on.
void stopAgentAs(int signal) {
  struct sigaction byDefault {};
  byDefault.sa_handler = SIG_DFL;
  sigemptyset(&byDefault.sa_mask);
  struct sigaction asios {};
  ::sigaction(signal, &byDefault, &asios);
  ::raise(signal);  // the whole process stops here, every thread, until SIGCONT
  ::sigaction(signal, &asios, nullptr);
}

// SIGCHLD, job control and the handled signals, to the machine, until it has finished.
void forwardSignals(asio::signal_set& signals, AgentMachine& machine, FileTimerPipe* timerPipe) {
  signals.async_wait(
      [&signals, &machine, timerPipe](const boost::system::error_code& error, int signal) {
        if (error) return;
        if (signal == SIGCHLD) {
          machine.onChildExited();
        } else if (isStopSignal(signal)) {
          // Ctrl-Z: the workers and the timeouts first, then the agent itself; the same handler
          // continues them all once the agent runs again, before anything else is handled.
          machine.onSuspend(signal);
          // A FileTimer request written just before the workers stopped is taken now, so that its
          // deadline is moved on with the others.
          if (timerPipe != nullptr) timerPipe->readAvailable();
          stopAgentAs(signal);
          machine.onResume();
        } else if (signal == SIGCONT) {
          machine.onResume();  // already done when the agent stopped itself; nothing then
        } else {
          machine.onSignal(signal);
        }
        if (machine.state() != AgentMachine::State::kFinished)
          forwardSignals(signals, machine, timerPipe);
      });
}

// --numa-binding: every worker's CPUs, planned once from this node's topology before anything
// starts, and said one line per local rank (the same for every round: a worker's local rank
// keeps its GPU).
void planWorkerCpus(LaunchConfig& config, const Environment& environment) {
  if (config.numaBinding == NumaAffinity::kNone) return;
  std::optional<std::string> visibleDevices;
  if (auto it = environment.find(common::kEnvCudaVisibleDevices); it != environment.end()) {
    visibleDevices = it->second;
  }
  std::vector<WorkerCpus> plan;
  try {
    plan = planNumaBinding(readCpuTopology("/sys", allowedCpus(), visibleDevices),
                           config.numaBinding, config.nprocPerNode);
  } catch (const std::runtime_error& error) {  // TopologyError, NumaPlanError
    throw StartupError(fmt::format("--numa-binding {}: {}; drop --numa-binding to run unbound",
                                   numaAffinityName(config.numaBinding),
                                   common::printable(error.what())));
  }
  config.workerCpus.clear();
  for (const WorkerCpus& binding : plan) {
    std::fprintf(stderr, "ddprun: %s\n", bindingLine(binding, config.numaBinding).c_str());
    config.workerCpus.emplace_back(binding.cpus.begin(), binding.cpus.end());
  }
}

// Builds the agent and runs it to the end of the job; returns its exit code. Throws StartupError
// for what stops it before any worker.
int runWired(LaunchConfig& config, const Environment& environment, Guardian* guardian) {
  // Before anything else reads stdin (readStdinSignals below takes what follows the line).
  std::optional<rendezvous::JobSecret> stdinToken;
  if (config.tokenFromStdin) stdinToken = readTokenLine(STDIN_FILENO, kTokenLineWait);
  const std::optional<HealthEndpoint> healthEndpoint =
      healthEndpointOf(environment);    // bad: exit 2 now
  planWorkerCpus(config, environment);  // bad: exit 2 now
  const common::DescriptorLimit descriptors = common::raiseDescriptorLimit();
  RunDirectories directories(config, environment, guardian);
  if (setsOmpNumThreads(environment, config)) spdlog::warn("{}", ompNumThreadsWarning());

  AgentIdentity identity = identityOf(environment, directories, guardian);
  const fs::path privateDir = directories.privateDir();
  const std::string timerFile = fileTimerPath(privateDir.string(), identity);

  asio::io_context io;
  AsioEventLoop loop(io);
  PosixLauncher launcher(guardian, descriptors.started);
  // The console: written by threads of its own, so a stalled reader never stalls the loop.
  auto outWriter = std::make_shared<ConsoleWriter>(STDOUT_FILENO, io);
  auto errWriter = samePlace(STDOUT_FILENO, STDERR_FILENO)  // one place, one queue: samePlace()
                       ? outWriter
                       : std::make_shared<ConsoleWriter>(STDERR_FILENO, io);
  LogThroughConsole logThrough(errWriter);
  identity.printError = [errWriter](std::string text) { errWriter->write(std::move(text)); };
  LogRouterOptions routerOptions = logOptions(config, identity);
  routerOptions.outWriter = outWriter;
  routerOptions.errWriter = errWriter;

  // The job's stores from its rendezvous options, all in stores/: how to reach them, whether this
  // agent hosts the rendezvous store, and the backend; Membership runs on that backend.
  HostedStores stores(loadStoreAccess(config.rdzv, std::move(stdinToken)),
                      hostedStoreConnections(config.nprocPerNode, descriptors.inForce));
  rendezvous::TcpStoreOptions storeOptions;
  const std::optional<RelayHandoffPlan> handoff =
      stores.relaysWorkers() ? planRelayHandoff(config, privateDir) : std::nullopt;
  try {
    storeOptions = stores.hostOrFind(config.rdzv, handoff ? handoff->socket : std::string());
  } catch (const std::exception& error) {
    throw StartupError(error.what());
  }
  if (handoff) addRelayHandoff(*handoff, stores.relayHandoffVariable(), identity.environment);
  identity.hostsStore = stores.hostsRendezvous();
  identity.address = stores.advertisedAddress(config.rdzv);

  std::unique_ptr<StoreBackend> backend;
  try {
    backend = makeStoreBackend(config.rdzv, {storeOptions});
  } catch (const StoreBackendError& error) {
    throw StartupError(error.what());
  }
  // Who forms the rounds. A --standalone job is one node on the store this agent hosts on
  // 127.0.0.1 at a free port under a random run id: no other agent can join its rounds, so they
  // form at once without the store (SoloRendezvous: no store round trips and none of the
  // membership's threads at each launch and restart). Safe because nothing else can reach them:
  // the store goes with this process (nothing to fence against, no node to count lost), nobody else
  // knows the run id, and --nnodes is 1 (the CLI refuses more with --standalone). The store-wide
  // active-run claim is dropped with it: it keeps an agent of another run id out of a shared
  // endpoint, and this private port and random id have none. The hosted store and the status
  // publisher stay, so `ddprun status` reads status/<id> as for any other job.
  const bool formsAlone =
      config.rdzv.standalone && identity.hostsStore && config.rdzv.maxNodes == 1;
  std::unique_ptr<SoloRendezvous> solo;
  std::unique_ptr<MembershipDriver> driver;
  if (formsAlone) {
    solo = std::make_unique<SoloRendezvous>(selfNode(config, identity), loop, backend->address());
  } else {
    driver =
        std::make_unique<MembershipDriver>(config.rdzv, *backend, selfNode(config, identity), loop);
  }
  RendezvousClient& rendezvous = solo ? static_cast<RendezvousClient&>(*solo) : *driver;
  AgentDiagnostics diagnostics(privateDir, identity, loop, launcher.cgroupPath(),
                               config.hang.nativeStackBudget);
  diagnostics.prepareAhead(config.nprocPerNode);  // the heartbeat files, while the round forms
  // The health gate before each round (health/): it outlives the machine, which calls it.
  NodeHealthGate healthGate(config.health, healthFactsOf(config, identity), loop);
  WorkerDiagnostics seams = diagnostics.seams(config, errWriter);
  seams.health = &healthGate;
  // --progress-pattern, --start-pattern, --fail-pattern: the router matches the workers' lines
  // and tells LineProgress, which the hang rules read as the heartbeats (the files too) and
  // which hands a failing line to the machine (on the loop, after the router's read).
  AgentMachine* machineForLines = nullptr;  // set once the machine exists
  std::optional<LineProgress> lineProgress;
  if (config.hang.anyLinePattern()) {
    try {
      routerOptions.patterns = std::make_shared<const LinePatterns>(LinePatterns::of(config.hang));
    } catch (const std::invalid_argument& error) {
      throw StartupError(error.what());
    }
    lineProgress.emplace(*seams.heartbeats, loop, config.hang,
                         [&machineForLines](int localRank, std::string detail) {
                           if (machineForLines != nullptr)
                             machineForLines->onFailLine(localRank, std::move(detail));
                         });
    seams.heartbeats = &*lineProgress;
    routerOptions.lineEvents = &*lineProgress;
  }
  LogRouter output(io, routerOptions);

  int code = 0;
  AgentMachine machine(config, identity, loop, launcher, output, rendezvous, stores,
                       std::move(seams), [&](int exitCode) {
                         code = exitCode;
                         io.stop();
                       });
  machineForLines = &machine;
  if (solo) solo->attach(machine);
  if (driver) driver->attach(machine);
  // `ddprun status`: this agent's snapshot, kept in the rendezvous (agent/status_feed.h).
  StatusPublisher statusPublisher(*backend, config.rdzv.runId);
  StatusFeed statusFeed(loop, machine, statusPublisher,
                        [&rendezvous] { return rendezvous.nodeId(); });
  const auto timerPipe = serveFileTimers(io, timerFile, machine);
  auto health = serveHealth(io, healthEndpoint, machine, config.role, stores);  // on this loop
  outWriter->whenClosed([&machine] { machine.onConsoleClosed(); });

  asio::signal_set signals(io);
  signals.add(SIGCHLD);
  // Job control whatever --signals-to-handle says (those are the signals that end the job): the
  // workers' sessions are their own, so only the agent can stop and continue them with the job.
  for (int signal : {SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT}) signals.add(signal);
  for (int signal : config.restart.signalsToHandle) {
    if (!isStopSignal(signal) && signal != SIGCONT) signals.add(signal);
  }
  forwardSignals(signals, machine, timerPipe.get());
  // --stop-on-stdin-eof: the ssh driver's signals come on stdin, and its end is stdin's end.
  const auto stdinReader =
      !config.stopOnStdinEof ? nullptr : readStdinSignals(io, [&machine](int signal) {
        if (machine.state() != AgentMachine::State::kFinished) machine.onSignal(signal);
      });
  machine.start();
  statusFeed.start();
  io.run();
  health.reset();  // the loop no longer answers: probes are refused from now on, not left waiting

  // A signalled agent is gone within its --shutdown-timeout, even when it hosts the store; the
  // others were told it leaves with the store, so they do not wait for it.
  const bool signalled = machine.ending() && machine.ending()->kind == EndKind::kSignalled;
  // A one-node job on the store this agent hosts (--standalone, --nnodes 1): the store and all
  // its keys end with this process in a moment, and no other agent can be waiting in it. Writing
  // the final snapshot and giving up the holds there would be read by nobody, and cost a
  // connection of the status publisher's own, five round trips and a dozen thread hand-offs at
  // the end of every such job.
  const bool storeEndsAlone = identity.hostsStore && config.rdzv.maxNodes == 1;
  // The final snapshot (finished, with the exit code) while this agent is still a member; not
  // when the store is gone, and briefly when a signal asks the agent to be quick.
  if (!storeEndsAlone && (!machine.ending() || machine.ending()->kind != EndKind::kStoreLost)) {
    statusFeed.finish(signalled ? std::chrono::milliseconds(500) : std::chrono::milliseconds(2000));
  }
  rendezvous.leave(identity.hostsStore, storeEndsAlone,
                   signalled ? std::optional(std::min(config.restart.shutdownTimeout,
                                                      config.rdzv.settings.closeTimeout))
                             : std::nullopt);
  output.closeAll();
  // The failure summary points into the scratch directory (error files): keep it then, as
  // torchrun keeps its torchelastic_* directory.
  if (machine.ending() && machine.ending()->kind == EndKind::kJobFailed) directories.keepScratch();
  return code;
}

}  // namespace

int runAgent(const LaunchConfig& given, const std::map<std::string, std::string>& environment,
             Guardian* guardian) {
  std::signal(SIGPIPE, SIG_IGN);
  LaunchConfig config = given;
  try {
    return runWired(config, environment, guardian);
  } catch (const StartupError& error) {
    // Everything built so far is gone (the console writers flushed what they held), so this line
    // comes last, as the bad input's one line.
    const Ending ending = Ending::badInput(fmt::format("ddprun: error: {}", error.what()));
    std::fprintf(stderr, "%s\n", ending.message.c_str());
    return exitCode(ending);
  } catch (const std::exception& error) {
    // Anything else that escapes is a bug; still one line and the bad-input code, never an
    // abort (std::terminate would skip the guardian's orderly end and print no reason).
    const Ending ending = Ending::badInput(
        fmt::format("ddprun: error: {} (an unexpected error: please report it with this line)",
                    common::printable(error.what())));
    std::fprintf(stderr, "%s\n", ending.message.c_str());
    return exitCode(ending);
  }
}

}  // namespace ddprun::launcher
