// The real agent: the AgentMachine (agent_machine.h) wired to Boost.Asio (the event loop, the
// signals, the workers' pipes), POSIX processes, the TCP store and the rendezvous store this
// agent may host. Everything that decides is in the machine; this file only builds and connects.
#include "ddprun/launcher/agent.h"

#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "machine/agent_machine.h"
#include "agent/asio_event_loop.h"
#include "output/console_writer.h"
#include "ddprun/common/descriptor_limit.h"
#include "ddprun/common/local_address.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/worker_env_names.h"
#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/tls.h"
#include "hang/file_timer_pipe.h"
#include "hang/hang_evidence.h"
#include "output/log_router.h"
#include "hang/oom.h"
#include "hang/progress_watch.h"
#include "hang/python_stack_hook.h"
#include "process/posix_launcher.h"
#include "membership/membership_driver.h"
#include "process/worker_env.h"

namespace ddprun::launcher {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr int kUsageError = 2;

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// True for a host name (not "localhost", not an IP literal) that resolves here to loopback
// addresses only: Debian's "127.0.1.1 <hostname>" line in /etc/hosts does that to a machine's own
// name, while the other nodes resolve the name to the machine's real address.
bool namesThisHostThroughLoopback(const std::string& host) {
  if (host == "localhost") return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) == 0) {  // an IP literal
    ::freeaddrinfo(found);
    return false;
  }
  hints.ai_flags = 0;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool loopbackOnly = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopbackOnly = loopbackOnly && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopbackOnly = loopbackOnly && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
  }
  ::freeaddrinfo(found);
  return loopbackOnly;
}

// How many connections each store this agent hosts may hold, given its descriptor limit. Without
// a cap, idle connections to its store could take every descriptor, and the agent could then not
// make the pipes to restart a worker. So it keeps a reserve: 64 for itself (stdio, the event
// loop's epoll and eventfds, its own store clients, the FileTimer pipe, the listeners, /proc and
// cgroup reads) and 16 per local worker (about 10 at once at worst: its stdout and stderr pipes or
// pty, both ends while it is spawned, the spawn's error pipe, its log files under --redirects or
// --tee, its heartbeat file, a debugger's pipe when it hangs). The rest is split between the two
// stores it may host (the job's rendezvous store and the workers' store).
std::size_t hostedStoreConnections(const LaunchConfig& config, std::size_t descriptorLimit) {
  const std::size_t reserve = 64 + 16 * static_cast<std::size_t>(std::max(1, config.nprocPerNode));
  const std::size_t perStore = descriptorLimit > reserve ? (descriptorLimit - reserve) / 2 : 0;
  // A store needs a few connections for the agents' own clients; below that nothing would work.
  constexpr std::size_t kFewest = 16;
  return std::clamp(perStore, kFewest, rendezvous::ServerOptions{}.maxConnections);
}

// The stores this agent may serve: the job's rendezvous store (standalone, static node 0, or the
// first c10d agent on its endpoint) and, as group rank 0 of a c10d round, the workers' store.
class HostedStores final : public WorkerStoreHost {
 public:
  // With a secret, every store this agent hosts wants it, and the workers go through a relay.
  // With TLS as well, every store connection between hosts is a TLS one.
  HostedStores(std::optional<rendezvous::JobSecret> secret,
               std::shared_ptr<const rendezvous::TlsConfig> tls, std::size_t maxConnections)
      : secret_(std::move(secret)), tls_(std::move(tls)), maxConnections_(maxConnections) {}

  // Decides whether to host the rendezvous store and starts it; returns where to reach it.
  // Throws rendezvous::ServerError when this agent must host it and cannot.
  rendezvous::TcpStoreOptions hostOrFind(const LaunchConfig& config);
  // Where the other nodes reach this one (MASTER_ADDR if rank 0).
  std::string advertisedAddress(const LaunchConfig& config) const;
  bool hostsRendezvous() const { return rendezvous_ != nullptr; }

  // Called on the loop when a round forms (the previous round's workers are gone by then).
  std::uint16_t host(const std::string& address) override {
    rendezvous::ServerOptions options = serverOptions();
    options.host = listenEverywhere_ ? "0.0.0.0" : address;
    options.port = 0;
    workers_.reset();
    workers_ = std::make_unique<rendezvous::RendezvousServer>(options);
    workers_->start();
    warnIfOpen(options.host, "the workers' store");
    return workers_->port();
  }

  std::pair<std::string, std::uint16_t> reachFromWorkers(const std::string& host,
                                                         std::uint16_t port) override {
    if (!relay_) return {host, port};
    relay_->setUpstream(host, port);
    return {"127.0.0.1", relay_->port()};
  }

 private:
  rendezvous::ServerOptions serverOptions() const {
    rendezvous::ServerOptions options;
    options.secret = secret_;
    options.tls = tls_;
    options.maxConnections = maxConnections_;
    return options;
  }
  // One line, the first time a store of this agent listens where other hosts reach it, open.
  void warnIfOpen(const std::string& host, std::string_view which) {
    if (secret_ || warnedOpen_ || common::isLoopbackAddress(host)) return;
    warnedOpen_ = true;
    spdlog::warn("{} listens on {} without a token: anyone who reaches it can read and change the "
                 "job's rendezvous; give every agent --rdzv-conf token_file=PATH (a mode-600 file "
                 "with the job's secret) on a network you do not trust",
                 which, host);
  }

  std::optional<rendezvous::JobSecret> secret_;
  std::shared_ptr<const rendezvous::TlsConfig> tls_;
  std::unique_ptr<rendezvous::LoopbackRelay> relay_;
  std::unique_ptr<rendezvous::RendezvousServer> rendezvous_;
  std::unique_ptr<rendezvous::RendezvousServer> workers_;
  std::size_t maxConnections_;
  bool listenEverywhere_ = false;
  bool warnedOpen_ = false;
};

rendezvous::TcpStoreOptions HostedStores::hostOrFind(const LaunchConfig& config) {
  const RendezvousConfig& rdzv = config.rdzv;
  rendezvous::TcpStoreOptions store;
  store.dialect = rendezvous::WireDialect::kTorch2;
  store.host = rdzv.host;
  store.port = rdzv.port;
  store.secret = secret_;
  store.tls = tls_;
  // The workers' relay first: its failure (no descriptors) ends the agent before it joins anyone.
  if (secret_) {
    rendezvous::RelayOptions relay{*secret_};
    relay.tls = tls_;
    relay_ = std::make_unique<rendezvous::LoopbackRelay>(std::move(relay));
  }
  const bool staticHost = rdzv.backend == RdzvBackend::kStatic && rdzv.nodeRank == 0;
  const bool mustHost = staticHost || rdzv.standalone || rdzv.settings.isHost.value_or(false);
  const bool mayHost = mustHost || (rdzv.backend == RdzvBackend::kC10d && !rdzv.settings.isHost);
  // A multi-node job's endpoint named through loopback here: listen on every interface (as
  // torchrun always does) and advertise the name, which the other nodes resolve for themselves.
  listenEverywhere_ = mayHost && rdzv.maxNodes > 1 && rdzv.localAddr.empty() &&
                      namesThisHostThroughLoopback(rdzv.host);
  if (!mayHost) return store;
  rendezvous::ServerOptions options = serverOptions();
  options.host = listenEverywhere_ ? "0.0.0.0" : rdzv.host;
  options.port = rdzv.port;
  try {
    rendezvous_ = std::make_unique<rendezvous::RendezvousServer>(options);
    rendezvous_->start();
  } catch (const rendezvous::ServerError& error) {
    // c10d: the endpoint is served already (another agent of this job, or ddprun-rendezvous),
    // or it is another host's address: be a client.
    const bool someoneElses = error.code() == rendezvous::ServerError::Code::kAddressInUse ||
                              error.code() == rendezvous::ServerError::Code::kAddressNotAvailable;
    if (mustHost || !someoneElses) throw;
    rendezvous_.reset();
    listenEverywhere_ = false;
    return store;
  }
  store.port = rendezvous_->port();
  if (listenEverywhere_) {
    spdlog::warn("the rendezvous endpoint {} resolves to a loopback address on this host, which "
                 "other nodes cannot reach: listening on all interfaces instead; give "
                 "--rdzv-endpoint this host's network address to listen on it alone",
                 rdzv.host);
  }
  spdlog::info("hosting the rendezvous store on {} (at most {} connections{})",
               rendezvous_->address(), maxConnections_,
               tls_      ? "; TLS, and clients must prove the job's token"
               : secret_ ? "; clients must prove the job's token"
                         : "");
  warnIfOpen(options.host, "the rendezvous store");
  return store;
}

std::string HostedStores::advertisedAddress(const LaunchConfig& config) const {
  const RendezvousConfig& rdzv = config.rdzv;
  if (!rdzv.localAddr.empty()) return rdzv.localAddr;
  if (rdzv.standalone) return "127.0.0.1";
  if (listenEverywhere_) return rdzv.host;
  return common::localAddressToward(rdzv.host, rdzv.port).value_or("127.0.0.1");
}

// The agent's own log lines, queued on its stderr writer like the workers' lines: the loop
// never waits on a stalled stderr either.
class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(std::shared_ptr<ConsoleWriter> writer) : writer_(std::move(writer)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t line;
    formatter_->format(message, line);
    writer_->write(std::string(line.data(), line.size()));
  }
  void flush_() override {}

 private:
  std::shared_ptr<ConsoleWriter> writer_;
};

// For the agent's run, its log lines go to `writer`; the sinks it had come back afterwards.
class LogThrough {
 public:
  explicit LogThrough(std::shared_ptr<ConsoleWriter> writer)
      : logger_(spdlog::default_logger()), saved_(logger_->sinks()) {
    auto sink = std::make_shared<ConsoleSink>(std::move(writer));
    sink->set_pattern(kLogPattern);
    logger_->sinks() = {sink};
  }
  ~LogThrough() { logger_->sinks() = saved_; }
  LogThrough(const LogThrough&) = delete;
  LogThrough& operator=(const LogThrough&) = delete;

 private:
  std::shared_ptr<spdlog::logger> logger_;
  std::vector<spdlog::sink_ptr> saved_;
};

bool selectsAny(const StreamSelection& selection) {
  if (selection.all.out || selection.all.err) return true;
  return std::any_of(selection.perRank.begin(), selection.perRank.end(),
                     [](const auto& entry) { return entry.second.out || entry.second.err; });
}

LogRouterOptions logOptions(const LaunchConfig& config, const AgentIdentity& identity) {
  LogRouterOptions options;
  options.role = config.role;
  if (auto it = identity.environment.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
      it != identity.environment.end()) {
    options.prefixTemplate = it->second;  // "" too: no prefix at all
  }
  options.passThrough = config.nprocPerNode == 1 && !options.prefixTemplate;
  options.terminalStdout = ::isatty(STDOUT_FILENO) == 1;
  options.hostname = identity.hostname;
  options.redirects = config.logs.redirects;
  options.tee = config.logs.tee;
  options.localRanksFilter = config.logs.localRanksFilter;
  options.duplicateStdoutFilters = config.logs.duplicateStdoutFilters;
  options.duplicateStderrFilters = config.logs.duplicateStderrFilters;
  return options;
}

}  // namespace

int runAgent(const LaunchConfig& given, const std::map<std::string, std::string>& environment,
             Guardian* guardian) {
  std::signal(SIGPIPE, SIG_IGN);
  const common::DescriptorLimit descriptors = common::raiseDescriptorLimit();
  LaunchConfig config = given;
  if (config.logs.dir.empty() && (selectsAny(config.logs.redirects) || selectsAny(config.logs.tee))) {
    // As torchrun: -r/-t without --log-dir write into a fresh temporary log directory.
    std::string pattern = (fs::temp_directory_path() / "ddprun_logs_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "ddprun: error: cannot create a temporary log directory (%s); give --log-dir\n",
                   std::strerror(errno));
      return kUsageError;
    }
    config.logs.dir = pattern;
    spdlog::warn("--redirects/--tee without --log-dir: the workers' log files go under {}", pattern);
  }
  if (setsOmpNumThreads(environment, config)) spdlog::warn("{}", ompNumThreadsWarning());

  AgentIdentity identity;
  identity.hostname = hostName();
  identity.environment = environment;
  identity.agentMarker = fmt::format("{}-{}", ::getpid(), common::randomHexId());
  if (guardian) guardian->killHoldersOf(fmt::format("{}={}", common::kEnvDdprunAgent, identity.agentMarker));
  if (config.logs.dir.empty()) {
    identity.scratchDir =
        (fs::temp_directory_path() / fmt::format("ddprun-{}-{}", config.rdzv.runId, ::getpid())).string();
    if (guardian) guardian->removeOnDeath(identity.scratchDir);  // even after kill -9
  } else {
    // A directory of this run's own, as torchrun makes (<run id>_<random>): a second run, or a
    // concurrent one with the same run id, never writes into another run's files.
    std::string pattern = (fs::path(config.logs.dir) / (config.rdzv.runId + "_XXXXXX")).string();
    std::error_code ignored;
    fs::create_directories(config.logs.dir, ignored);
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "ddprun: error: cannot create a log directory under --log-dir %s: %s; "
                   "give a writable --log-dir\n", config.logs.dir.c_str(), std::strerror(errno));
      return kUsageError;
    }
    identity.logRunDir = pattern;
    spdlog::info("logs of this run: {}", identity.logRunDir);
  }

  // The agent's own files: heartbeats, the Python stack hook and its dumps, the FileTimer pipe.
  std::string privatePattern = (fs::temp_directory_path() / "ddprun-agent-XXXXXX").string();
  if (::mkdtemp(privatePattern.data()) == nullptr) {
    std::fprintf(stderr, "ddprun: error: cannot create a directory under %s (%s); set TMPDIR to a "
                 "writable directory\n", fs::temp_directory_path().c_str(), std::strerror(errno));
    return kUsageError;
  }
  const fs::path privateDir = privatePattern;
  if (guardian) guardian->removeOnDeath(privateDir.string());
  struct RemoveOnExit {
    fs::path dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } removePrivateDir{privateDir};
  std::error_code notMade;  // a failure shows when a worker's heartbeat file cannot be made
  fs::create_directories(privateDir / "heartbeats", notMade);
  HeartbeatFiles heartbeats((privateDir / "heartbeats").string());

  EvidenceOptions evidenceOptions;
  try {
    const PythonStackHook hook = installPythonStackHook((privateDir / "stack_hook").string());
    addPythonStackHook(hook, identity.environment);
    evidenceOptions.pythonStackDir = hook.stackDir;
    evidenceOptions.pythonStackSignal = hook.signal;
  } catch (const std::exception& error) {
    spdlog::warn("hung Python workers will be reported without their Python stacks: {}", error.what());
  }
  // A native backtrace when gdb is installed; DDPRUN_HANG_DEBUGGER names another, or "" for none
  // (gdb takes seconds on a process that loaded libtorch).
  if (auto debugger = environment.find("DDPRUN_HANG_DEBUGGER"); debugger != environment.end()) {
    evidenceOptions.debugger = debugger->second.empty()
                                   ? ""
                                   : common::findExecutable(debugger->second, environment).value_or("");
  } else {
    evidenceOptions.debugger = common::findExecutable("gdb", environment).value_or("");
  }

  // torch's FileTimer watchdog (torchrun starts its FileTimerServer on the same variables).
  std::string timerFile;
  if (auto enabled = environment.find(common::kEnvTorchelasticEnableFileTimer);
      enabled != environment.end() && enabled->second == "1") {
    auto path = environment.find(common::kEnvTorchelasticTimerFile);
    timerFile = path != environment.end() && !path->second.empty() ? path->second
                                                                       : (privateDir / "watchdog_timer").string();
    identity.environment[common::kEnvTorchelasticTimerFile] = timerFile;
  }

  asio::io_context io;
  AsioEventLoop loop(io);
  PosixLauncher launcher(guardian, descriptors.started);
  // The console: written by threads of its own, so a stalled reader never stalls the loop.
  auto outWriter = std::make_shared<ConsoleWriter>(STDOUT_FILENO, io);
  auto errWriter = std::make_shared<ConsoleWriter>(STDERR_FILENO, io);
  LogThrough logThrough(errWriter);
  identity.printError = [errWriter](std::string text) { errWriter->write(std::move(text)); };
  LogRouterOptions routerOptions = logOptions(config, identity);
  routerOptions.outWriter = outWriter;
  routerOptions.errWriter = errWriter;
  LogRouter output(io, routerOptions);
  std::optional<rendezvous::JobSecret> secret;
  if (!config.rdzv.settings.tokenFile.empty()) {
    try {
      secret = rendezvous::readTokenFile(config.rdzv.settings.tokenFile);
    } catch (const rendezvous::TokenFileError& error) {
      errWriter->write(fmt::format("ddprun: error: --rdzv-conf token_file: {}\n", error.what()));
      return kUsageError;
    }
  }
  std::shared_ptr<const rendezvous::TlsConfig> tls;
  if (!config.rdzv.settings.tlsCert.empty()) {
    try {
      const RendezvousSettings& s = config.rdzv.settings;
      tls = rendezvous::TlsConfig::load({s.tlsCert, s.tlsKey, s.tlsCa});
    } catch (const rendezvous::TlsError& error) {
      errWriter->write(fmt::format("ddprun: error: --rdzv-conf: {}\n", error.what()));
      return kUsageError;
    }
  }
  HostedStores stores(std::move(secret), std::move(tls),
                      hostedStoreConnections(config, descriptors.inForce));
  rendezvous::TcpStoreOptions storeOptions;
  try {
    storeOptions = stores.hostOrFind(config);
  } catch (const std::exception& error) {
    errWriter->write(fmt::format("ddprun: error: {}\n", error.what()));
    return kUsageError;
  }
  identity.hostsStore = stores.hostsRendezvous();

  NodeInfo self;
  self.address = stores.advertisedAddress(config);
  self.hostname = identity.hostname;
  self.nproc = config.nprocPerNode;
  self.pid = ::getpid();
  self.staticRank = config.rdzv.backend == RdzvBackend::kStatic ? config.rdzv.nodeRank : -1;
  TcpStoreBackend backend(storeOptions);
  MembershipDriver driver(config.rdzv, backend, self, loop);

  auto evidence = makeThreadedEvidenceCollector(loop, evidenceOptions);
  KernelOomWitness oom(launcher.cgroupPath());
  WorkerWatch watch;
  watch.heartbeats = &heartbeats;
  watch.evidence = evidence.get();
  watch.oom = &oom;
  if (config.eventLogHandler == "console") {
    watch.event = [errWriter](std::string line) { errWriter->write(std::move(line)); };
  }

  int code = 0;
  AgentMachine machine(config, identity, loop, launcher, output, driver, stores, std::move(watch), [&](int exitCode) {
    code = exitCode;
    io.stop();
  });
  driver.attach(machine);
  std::unique_ptr<FileTimerPipe> timerPipe;
  if (!timerFile.empty()) {
    try {
      timerPipe = std::make_unique<FileTimerPipe>(io, timerFile, [&machine](std::string_view line) {
        machine.onFileTimerLine(line);
      });
      spdlog::info("serving torch's FileTimer requests on {}", timerFile);
    } catch (const std::exception& error) {
      errWriter->write(fmt::format("ddprun: error: {}; set {} to a path in a writable directory, or "
                                   "unset {}\n", error.what(), common::kEnvTorchelasticTimerFile,
                                   common::kEnvTorchelasticEnableFileTimer));
      return kUsageError;
    }
  }
  outWriter->whenClosed([&machine] { machine.onConsoleClosed(); });

  asio::signal_set signals(io);
  signals.add(SIGCHLD);
  for (int signal : config.restart.signalsToHandle) signals.add(signal);
  std::function<void()> listen = [&] {
    signals.async_wait([&](const boost::system::error_code& error, int signal) {
      if (error) return;
      if (signal == SIGCHLD) {
        machine.onChildExited();
      } else {
        machine.onSignal(signal);
      }
      if (machine.state() != AgentMachine::State::kFinished) listen();
    });
  };
  listen();
  machine.start();
  io.run();

  // A signalled agent is gone within its --shutdown-timeout, even when it hosts the store; the
  // others were told it leaves with the store, so they do not wait for it.
  const bool signalled = machine.ending() && machine.ending()->kind == EndKind::kSignalled;
  driver.close(/*hostsStore=*/identity.hostsStore,
               signalled ? std::optional(std::min(config.restart.shutdownTimeout,
                                                  config.rdzv.settings.closeTimeout))
                         : std::nullopt);
  output.closeAll();
  // The failure summary points into the scratch directory (error files): keep it then, as
  // torchrun keeps its torchelastic_* directory.
  const bool summaryPointsHere = machine.ending() && machine.ending()->kind == EndKind::kJobFailed;
  if (!identity.scratchDir.empty() && !summaryPointsHere) {
    std::error_code ignored;
    fs::remove_all(identity.scratchDir, ignored);
  }
  return code;
}

}  // namespace ddprun::launcher
