// The agent's state machine. Everything happens on one event loop (the main thread): child
// exits (SIGCHLD), signals, worker output, timers, and the results of store calls, which run on
// a control thread (joining rounds, announcing stops) and a watch thread (blocked on the round's
// stop key) so that the loop never blocks.
//
//   joining --round formed--> running --all local workers exit 0--> local done --"done"--> exit 0
//                               |  \                                    |
//            a worker failed / a stop arrives / a signal                 | a stop arrives
//                               v                                        v
//                            stopping (SIGTERM, grace, SIGKILL) --all gone--> next step:
//              failure: restart (job-global budget) or exit with the root cause's code;
//              node lost/joined/left: re-form (no restart counted); signal: exit 128+signal.
#include "ddprun/launcher/agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "ddprun/rendezvous/server.h"
#include "failure_report.h"
#include "log_router.h"
#include "membership.h"
#include "process_group.h"
#include "worker_env.h"

namespace ddprun::launcher {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kRendezvousFailed = 1;
constexpr int kUsageError = 2;

// Runs blocking store calls off the event loop: one thread, one call at a time, in order. A
// call's exception is handed to the event loop.
class ControlThread {
 public:
  using Call = std::function<void()>;
  using OnError = std::function<void(std::exception_ptr)>;

  explicit ControlThread(asio::io_context& io) : io_(io), thread_([this] { loop(); }) {}
  ~ControlThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void run(Call call, OnError onError) {
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(std::move(call), std::move(onError));
    }
    wake_.notify_all();
  }

 private:
  void loop() {
    for (;;) {
      std::pair<Call, OnError> next;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        next.first();
      } catch (...) {
        asio::post(io_, [onError = std::move(next.second), error = std::current_exception()] {
          onError(error);
        });
      }
    }
  }

  asio::io_context& io_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Call, OnError>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// The message of a store call's exception, whatever it was.
std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The address of this host that routes to `host`: what other nodes can reach us at. A UDP
// "connect" sends nothing; it only asks the kernel which local address it would use.
std::string addressTowards(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port == 0 ? 9 : port).c_str(), &hints, &found) != 0) {
    return "127.0.0.1";
  }
  std::string address = "127.0.0.1";
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, raw, text, sizeof text)) address = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return address;
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

double epochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct LocalWorker {
  int localRank = 0;
  int rank = 0;
  pid_t pid = -1;
  std::string errorFile;
  bool running = false;
  bool judged = false;  // its exit has been looked at
  int waitStatus = 0;
  double exitedAt = 0;
};

class Agent {
 public:
  Agent(const LaunchConfig& config, const std::map<std::string, std::string>& environment,
        Guardian* guardian)
      : config_(config),
        environment_(environment),
        guardian_(guardian),
        workers_(guardian),
        signals_(io_),
        graceTimer_(io_),
        barrierTimer_(io_),
        hostname_(hostName()) {}

  int run();

 private:
  enum class State { kJoining, kRunning, kLocalDone, kStopping, kFinished };

  void hostOrFindStore();
  void startMembership();
  void join(int round);
  // A join failed for good: exit 2 for a wrong endpoint (bad input), else 1.
  void onRendezvousFailed(std::exception_ptr error);
  void onRoundFormed(Round round);
  void startWorkers();
  void watch(int round);
  void onStop(int round, json stop);
  void onStoreLost(const std::string& reason);
  void onChildSignal();
  // Looks at the workers that exited: a failure stops the round, all done counts the node done.
  void judgeWorkers();
  void stopWorkers();
  void maybeRoundOver();
  void nextStep();
  void failJob(const json& stop);
  void onSignal(int signal);
  void finish(int code, const std::string& message = {});
  void listenForSignals();
  std::uint16_t hostWorkerStore(const std::string& address);
  std::string attemptDirectory(int round) const;

  LaunchConfig config_;
  std::map<std::string, std::string> environment_;
  asio::io_context io_;
  Guardian* guardian_;  // may be null
  WorkerProcesses workers_;
  asio::signal_set signals_;
  asio::steady_timer graceTimer_;
  asio::steady_timer barrierTimer_;
  std::string hostname_;
  std::unique_ptr<LogRouter> logs_;
  std::unique_ptr<ControlThread> control_;
  std::unique_ptr<Membership> membership_;
  std::thread watchThread_;

  // The rendezvous store this agent hosts, if any, and the current round's worker store.
  std::unique_ptr<rendezvous::RendezvousServer> rendezvousStore_;
  std::unique_ptr<rendezvous::RendezvousServer> workerStore_;
  rendezvous::TcpStoreOptions storeOptions_;
  std::string address_;           // where the other nodes reach this one (MASTER_ADDR if rank 0)
  bool listenEverywhere_ = false;  // see hostOrFindStore

  State state_ = State::kJoining;
  Round round_;
  std::vector<LocalWorker> local_;
  std::optional<json> stop_;                 // why the current round stops
  std::vector<WorkerFailure> localFailures_;  // this node's, in the current round
  int signalExit_ = 0;                       // 128+signal once a handled signal arrived
  int exitAfterStop_ = 0;                    // exit with this once the workers are gone
  std::string pendingExitMessage_;
  int exitCode_ = 0;
  fs::path scratch_;                         // error files when there is no --log-dir
  std::string agentToken_;                   // DDPRUN_AGENT of this agent's workers
};

std::string Agent::attemptDirectory(int round) const {
  const fs::path base = config_.logDir.empty() ? scratch_ : fs::path(config_.logDir) / config_.rdzvId;
  return (base / fmt::format("attempt_{}", round)).string();
}

void Agent::hostOrFindStore() {
  storeOptions_.dialect = rendezvous::WireDialect::kTorch2;
  storeOptions_.host = config_.rdzvHost;
  storeOptions_.port = config_.rdzvPort;
  const bool staticHost = config_.rdzvBackend == RdzvBackend::kStatic && config_.nodeRank == 0;
  const auto isHost = config_.rdzvConf.find("is_host");
  const bool mustHost = staticHost || config_.standalone ||
                        (isHost != config_.rdzvConf.end() &&
                         (isHost->second == "1" || isHost->second == "true" || isHost->second == "True"));
  const bool mayHost = mustHost || (config_.rdzvBackend == RdzvBackend::kC10d &&
                                    (isHost == config_.rdzvConf.end()));
  // A multi-node job's endpoint named through loopback here: listen on every interface (as
  // torchrun always does) and advertise the name, which the other nodes resolve for themselves.
  listenEverywhere_ = mayHost && config_.maxNodes > 1 && config_.localAddr.empty() &&
                      namesThisHostThroughLoopback(config_.rdzvHost);
  if (mayHost) {
    rendezvous::ServerOptions options;
    options.host = listenEverywhere_ ? "0.0.0.0" : config_.rdzvHost;
    options.port = config_.rdzvPort;
    try {
      rendezvousStore_ = std::make_unique<rendezvous::RendezvousServer>(options);
      rendezvousStore_->start();
      storeOptions_.port = rendezvousStore_->port();
      if (listenEverywhere_) {
        spdlog::warn("the rendezvous endpoint {} resolves to a loopback address on this host, "
                     "which other nodes cannot reach: listening on all interfaces instead; give "
                     "--rdzv-endpoint this host's network address to listen on it alone",
                     config_.rdzvHost);
      }
      spdlog::info("hosting the rendezvous store on {}", rendezvousStore_->address());
    } catch (const rendezvous::ServerError& error) {
      const std::string text = error.what();
      const bool taken = text.find("already in use") != std::string::npos;
      const bool foreign = text.find("no network interface") != std::string::npos;
      // c10d: the endpoint is served already (another agent of this job, or ddprun-rendezvous),
      // or it is another host's address: be a client.
      if (mustHost || !(taken || foreign)) {
        throw std::runtime_error(text);
      }
      listenEverywhere_ = false;  // another process hosts it
    }
  }
  address_ = !config_.localAddr.empty() ? config_.localAddr
             : config_.standalone       ? std::string("127.0.0.1")
             : listenEverywhere_        ? config_.rdzvHost
                                        : addressTowards(config_.rdzvHost, config_.rdzvPort);
}

std::uint16_t Agent::hostWorkerStore(const std::string& address) {
  // Runs on the control thread while the event loop does not touch workerStore_ (it is set
  // before onRoundFormed is posted, and reset only after the round's workers are gone).
  rendezvous::ServerOptions options;
  options.host = listenEverywhere_ ? "0.0.0.0" : address;
  options.port = 0;
  workerStore_ = std::make_unique<rendezvous::RendezvousServer>(options);
  workerStore_->start();
  return workerStore_->port();
}

void Agent::startMembership() {
  NodeInfo self;
  self.address = address_;
  self.hostname = hostname_;
  self.nproc = config_.nprocPerNode;
  self.pid = ::getpid();
  self.staticRank = config_.rdzvBackend == RdzvBackend::kStatic ? config_.nodeRank : -1;
  membership_ = std::make_unique<Membership>(
      config_, storeOptions_, self,
      [this](const std::string& address) { return hostWorkerStore(address); },
      [this](const std::string& reason) {
        asio::post(io_, [this, reason] { onStoreLost(reason); });
      });
  control_->run(
      [this] {
        membership_->open();
        Round round = membership_->join(-1);
        asio::post(io_, [this, round] { onRoundFormed(round); });
      },
      [this](std::exception_ptr error) { onRendezvousFailed(error); });
}

void Agent::onRendezvousFailed(std::exception_ptr error) {
  if (state_ == State::kFinished) return;
  try {
    std::rethrow_exception(error);
  } catch (const EndpointError& bad) {
    finish(kUsageError, fmt::format("ddprun: error: {}", bad.what()));
  } catch (...) {
    finish(kRendezvousFailed, fmt::format("ddprun: error: rendezvous failed: {}", describe(error)));
  }
}

void Agent::join(int round) {
  if (state_ == State::kFinished) return;
  state_ = State::kJoining;
  control_->run(
      [this, round] {
        Round formed = membership_->join(round);
        asio::post(io_, [this, formed] { onRoundFormed(formed); });
      },
      [this](std::exception_ptr error) { onRendezvousFailed(error); });
}

void Agent::onRoundFormed(Round round) {
  if (state_ == State::kFinished) return;
  if (signalExit_ != 0) {  // a signal arrived while joining
    finish(signalExit_);
    return;
  }
  round_ = std::move(round);
  stop_.reset();
  localFailures_.clear();
  spdlog::info("round {}: group rank {} of {}, world size {}, master {}:{}, restart {}",
               round_.number, round_.groupRank, round_.members.size(), round_.worldSize,
               round_.masterAddr, round_.masterPort, round_.restartCount);
  watch(round_.number);
  startWorkers();
}

void Agent::startWorkers() {
  const RoundEnvironment roundEnvironment{round_.masterAddr, round_.masterPort, round_.restartCount,
                                          round_.number, config_.rdzvId, agentToken_};
  const std::string attempt = attemptDirectory(round_.number);
  const auto spawnStart = Clock::now();
  local_.clear();
  state_ = State::kRunning;
  for (int localRank = 0; localRank < config_.nprocPerNode; ++localRank) {
    LocalWorker worker;
    worker.localRank = localRank;
    worker.rank = round_.baseRank + localRank;
    worker.errorFile = fmt::format("{}/{}/error.json", attempt, localRank);
    std::error_code ignored;
    fs::create_directories(fs::path(worker.errorFile).parent_path(), ignored);
    // An earlier job with the same run id and --log-dir may have left one: it must not be
    // taken for this worker's.
    fs::remove(worker.errorFile, ignored);
    const WorkerPlacement placement{localRank,       worker.rank, round_.worldSize,
                                    config_.nprocPerNode, round_.groupRank,
                                    static_cast<int>(round_.members.size())};
    try {
      const WorkerCommand command = workerCommand(config_, placement, environment_);
      const ChildStreams streams = logs_->prepare(localRank, worker.rank, round_.groupRank,
                                                  config_.logDir.empty() ? std::string() : attempt);
      const ExecPlan plan(command.path, command.argv,
                          workerEnvironment(environment_, config_, placement, roundEnvironment,
                                            worker.errorFile),
                          streams.out, streams.err);
      try {
        worker.pid = workers_.spawn(plan);
      } catch (...) {
        logs_->abandon(localRank);
        throw;
      }
      logs_->started(localRank);
      worker.running = true;
    } catch (const std::exception& error) {
      spdlog::error("cannot start worker {}: {}", localRank, error.what());
      // A worker that cannot start is a failure like any other (exit code 127, as a shell).
      WorkerFailure failure;
      failure.rank = worker.rank;
      failure.localRank = localRank;
      failure.groupRank = round_.groupRank;
      failure.host = hostname_;
      failure.exitCode = 127;
      failure.observedAt = epochSeconds();
      failure.message = error.what();
      localFailures_.push_back(failure);
      worker.judged = true;
    }
    local_.push_back(worker);
  }
  spdlog::debug("round {}: started {} workers in {:.1f} ms", round_.number, local_.size(),
                std::chrono::duration<double, std::milli>(Clock::now() - spawnStart).count());
  if (!localFailures_.empty()) {
    state_ = State::kStopping;
    const json stop{{"kind", stop_kind::kFailure}, {"failure", toJson(localFailures_.front())}};
    const int round = round_.number;
    control_->run([this, round, stop] { membership_->announce(round, stop); },
                  [](std::exception_ptr) {});
    stopWorkers();
  }
}

void Agent::watch(int round) {
  if (watchThread_.joinable()) watchThread_.join();  // the previous round's: it has returned
  watchThread_ = std::thread([this, round] {
    try {
      json stop = membership_->waitForStop(round);
      asio::post(io_, [this, round, stop] { onStop(round, stop); });
    } catch (const MembershipCancelled&) {
    } catch (const std::exception& error) {
      asio::post(io_, [this, reason = std::string(error.what())] { onStoreLost(reason); });
    }
  });
}

void Agent::onStop(int round, json stop) {
  if (state_ == State::kFinished || round != round_.number) return;
  stop_ = std::move(stop);
  const std::string kind = stop_->value("kind", std::string());
  if (kind == stop_kind::kDone) {
    // Every node's workers succeeded (the last one through the exit barrier said so).
    barrierTimer_.cancel();
    finish(0);
    return;
  }
  if (state_ == State::kRunning || state_ == State::kLocalDone) {
    if (kind == stop_kind::kNodeLost) {
      spdlog::warn("node {} ({}) was lost; stopping this round to re-form the job",
                   stop_->value("node", -1), stop_->value("host", std::string("?")));
    } else if (kind == stop_kind::kNodeJoined) {
      spdlog::info("node {} ({}) joins the job; re-forming", stop_->value("node", -1),
                   stop_->value("host", std::string("?")));
    } else if (kind == stop_kind::kNodeLeft) {
      spdlog::warn("node {} ({}) left the job; re-forming", stop_->value("node", -1),
                   stop_->value("host", std::string("?")));
    }
    state_ = State::kStopping;
    stopWorkers();
  }
  maybeRoundOver();
}

void Agent::onStoreLost(const std::string& reason) {
  if (state_ == State::kFinished) return;
  const std::string message = fmt::format(
      "ddprun: error: lost the rendezvous store at {}:{} ({}): the agent hosting it exited or the "
      "network to it is cut; stopping this node's workers",
      storeOptions_.host, storeOptions_.port, reason);
  if (workers_.anyRunning()) {
    pendingExitMessage_ = message;
    exitAfterStop_ = kRendezvousFailed;
    state_ = State::kStopping;
    stopWorkers();
    return;
  }
  finish(kRendezvousFailed, message);
}

void Agent::onChildSignal() {
  // Record every exit of the batch before judging the group: a successful exit reaped together
  // with a failed one must not make the node look done.
  bool anyExited = false;
  for (const ExitedWorker& exited : workers_.reap()) {
    auto worker = std::find_if(local_.begin(), local_.end(),
                               [&](const LocalWorker& w) { return w.pid == exited.pid; });
    if (worker == local_.end()) continue;
    worker->running = false;
    worker->waitStatus = exited.waitStatus;
    worker->exitedAt = epochSeconds();
    anyExited = true;
  }
  if (anyExited && state_ == State::kRunning) judgeWorkers();
  maybeRoundOver();
}

void Agent::judgeWorkers() {
  for (LocalWorker& worker : local_) {
    if (worker.running || worker.judged) continue;
    worker.judged = true;
    const int status = worker.waitStatus;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    WorkerFailure failure;
    failure.rank = worker.rank;
    failure.localRank = worker.localRank;
    failure.groupRank = round_.groupRank;
    failure.host = hostname_;
    failure.pid = worker.pid;
    if (WIFSIGNALED(status)) {
      failure.signal = WTERMSIG(status);
    } else {
      failure.exitCode = WEXITSTATUS(status);
    }
    failure.observedAt = worker.exitedAt;
    failure.errorFile = worker.errorFile;
    loadErrorFile(failure);
    spdlog::warn("worker {} (rank {}, pid {}) failed: {}", worker.localRank, worker.rank,
                 worker.pid, statusText(failure));
    localFailures_.push_back(failure);
  }
  if (!localFailures_.empty()) {
    // The earliest of this node's failures speaks for it; the store keeps the job's first.
    const WorkerFailure& first = localFailures_[rootCauseIndex(localFailures_)];
    state_ = State::kStopping;
    const json stop{{"kind", stop_kind::kFailure}, {"failure", toJson(first)},
                    {"node", membership_->self().id}};
    const int round = round_.number;
    control_->run([this, round, stop] { membership_->announce(round, stop); },
                  [](std::exception_ptr) {});  // a lost store is the watch thread's to report
    stopWorkers();
    return;
  }
  if (std::none_of(local_.begin(), local_.end(), [](const LocalWorker& w) { return w.running; })) {
    // Every local worker exited 0: count this node done; the last node announces "done".
    spdlog::debug("round {}: every local worker exited 0", round_.number);
    state_ = State::kLocalDone;
    const int round = round_.number;
    const int members = static_cast<int>(round_.members.size());
    control_->run([this, round, members] { membership_->markDone(round, members); },
                  [](std::exception_ptr) {});
    const auto barrier = config_.rdzvConf.count("exit_barrier_timeout")
                             ? std::chrono::milliseconds(static_cast<std::int64_t>(
                                   std::stod(config_.rdzvConf.at("exit_barrier_timeout")) * 1000))
                             : std::chrono::milliseconds(300000);
    barrierTimer_.expires_after(barrier);
    barrierTimer_.async_wait([this](const boost::system::error_code& error) {
      if (error || state_ != State::kLocalDone) return;
      if (rendezvousStore_) {
        // Leaving would take the store from under the nodes still at work and kill their workers.
        spdlog::warn("not every node has finished after the exit barrier's timeout; this agent "
                     "hosts the rendezvous store, so it stays until they finish or are lost");
        return;
      }
      spdlog::warn("the exit barrier timed out: not every node finished; exiting 0 as this node did");
      finish(0);
    });
  }
}

void Agent::stopWorkers() {
  if (!workers_.anyRunning()) return;
  const int signal = signalExit_ != 0 ? signalExit_ - 128 : SIGTERM;
  workers_.signalAll(signal);
  graceTimer_.expires_after(config_.shutdownTimeout);
  graceTimer_.async_wait([this](const boost::system::error_code& error) {
    if (error) return;
    if (workers_.anyRunning()) {
      spdlog::warn("workers still running {} ms after the stop signal: killing them",
                   config_.shutdownTimeout.count());
      workers_.signalAll(SIGKILL);
    }
  });
}

void Agent::maybeRoundOver() {
  if (state_ != State::kStopping || workers_.anyRunning()) return;
  graceTimer_.cancel();
  if (exitAfterStop_ != 0) {
    finish(exitAfterStop_, pendingExitMessage_);
    return;
  }
  if (signalExit_ != 0) {
    finish(signalExit_);
    return;
  }
  if (!stop_) return;  // the stop's reason is still on its way (our announce, or another's)
  state_ = State::kJoining;
  logs_->drain(200ms, [this] { nextStep(); });
}

void Agent::nextStep() {
  if (state_ == State::kFinished) return;  // a signal ended the agent while the logs drained
  workers_.killStrays();
  workerStore_.reset();
  const json& stop = *stop_;
  const std::string kind = stop.value("kind", std::string());
  if (kind == stop_kind::kFailure) {
    const int restarts = Membership::nextRestartCount(round_, stop);
    if (restarts > config_.maxRestarts) {
      failJob(stop);
      return;
    }
    const WorkerFailure cause = failureFromJson(stop.value("failure", json::object()));
    spdlog::warn("restarting the job (restart {} of {}) after rank {} on {} failed: {}", restarts,
                 config_.maxRestarts, cause.rank, cause.host, statusText(cause));
  }
  join(round_.number + 1);
}

void Agent::failJob(const json& stop) {
  // The root cause is the job's first failure (from the stop key, the same on every node); this
  // node's other failures of the round are listed with it.
  std::vector<WorkerFailure> failures{failureFromJson(stop.value("failure", json::object()))};
  for (const WorkerFailure& mine : localFailures_) {
    if (mine.rank != failures.front().rank || mine.host != failures.front().host) failures.push_back(mine);
  }
  const WorkerFailure& cause = failures.front();
  std::string entrypoint = config_.trainingScript;
  std::fputs(formatSummary(entrypoint, failures, /*rootCause=*/0).c_str(), stderr);
  std::fputc('\n', stderr);
  if (auto parent = environment_.find("TORCHELASTIC_ERROR_FILE"); parent != environment_.end()) {
    try {
      propagateErrorFile(cause, parent->second);
    } catch (const std::exception& error) {
      spdlog::warn("cannot write the error file for the parent: {}", error.what());
    }
  }
  finish(exitCodeOf(cause),
         fmt::format("ddprun: error: the job failed after {} restart(s): rank {} on {}: {}",
                     round_.restartCount, cause.rank, cause.host, statusText(cause)));
}

void Agent::onSignal(int signal) {
  if (state_ == State::kFinished) return;
  if (signalExit_ != 0) {
    // A second signal: no more patience.
    workers_.signalAll(SIGKILL);
    return;
  }
  signalExit_ = 128 + signal;
  spdlog::warn("received {}: forwarding it to the workers", signalNames({signal}));
  if (membership_ && state_ != State::kJoining) {
    const json stop{{"kind", stop_kind::kNodeLeft}, {"node", membership_->self().id},
                    {"host", hostname_}, {"signal", signalNames({signal})}};
    const int round = round_.number;
    control_->run([this, round, stop] { membership_->announce(round, stop); },
                  [](std::exception_ptr) {});
  }
  if (state_ == State::kJoining || !workers_.anyRunning()) {
    finish(signalExit_);
    return;
  }
  state_ = State::kStopping;
  stopWorkers();
}

void Agent::listenForSignals() {
  signals_.async_wait([this](const boost::system::error_code& error, int signal) {
    if (error) return;
    if (signal == SIGCHLD) {
      onChildSignal();
    } else {
      onSignal(signal);
    }
    if (state_ != State::kFinished) listenForSignals();
  });
}

void Agent::finish(int code, const std::string& message) {
  if (state_ == State::kFinished) return;
  spdlog::debug("finishing with exit code {}", code);
  state_ = State::kFinished;
  exitCode_ = code;
  if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
  graceTimer_.cancel();
  barrierTimer_.cancel();
  if (workers_.anyRunning()) {
    workers_.signalAll(SIGKILL);
    while (workers_.anyRunning()) {
      workers_.reap();
      std::this_thread::sleep_for(1ms);
    }
  }
  workers_.killStrays();
  // Every line the workers wrote reaches the console before the agent goes.
  logs_->drain(200ms, [this] { io_.stop(); });
}

int Agent::run() {
  std::signal(SIGPIPE, SIG_IGN);
  if (setsOmpNumThreads(environment_, config_)) spdlog::warn("{}", ompNumThreadsWarning());
  agentToken_ = fmt::format("{}-{}", ::getpid(), randomRunId());
  if (guardian_) guardian_->killHoldersOf(fmt::format("{}={}", kAgentTokenVariable, agentToken_));
  if (config_.logDir.empty()) {
    scratch_ = fs::temp_directory_path() / fmt::format("ddprun-{}-{}", config_.rdzvId, ::getpid());
    if (guardian_) guardian_->removeOnDeath(scratch_.string());  // even after kill -9
  }
  signals_.add(SIGCHLD);
  for (int signal : config_.signalsToHandle) signals_.add(signal);
  listenForSignals();

  LogRouterOptions logOptions;
  logOptions.role = config_.role;
  if (auto it = environment_.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != environment_.end()) {
    logOptions.prefixTemplate = it->second;
  }
  logOptions.hostname = hostname_;
  logOptions.redirects = config_.redirects;
  logOptions.tee = config_.tee;
  logOptions.localRanksFilter = config_.localRanksFilter;
  logOptions.duplicateStdoutFilters = config_.duplicateStdoutFilters;
  logOptions.duplicateStderrFilters = config_.duplicateStderrFilters;
  logs_ = std::make_unique<LogRouter>(io_, logOptions);

  try {
    hostOrFindStore();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ddprun: error: %s\n", error.what());
    return kUsageError;
  }
  control_ = std::make_unique<ControlThread>(io_);
  startMembership();
  io_.run();

  // Leave the rendezvous in order: stop our blocked calls, give up our holds (a clean exit is
  // not a lost node), and if we host the store, give the others a moment to read the outcome.
  if (membership_) membership_->cancel();
  control_.reset();
  if (watchThread_.joinable()) watchThread_.join();
  if (membership_) membership_->close(/*hostsStore=*/rendezvousStore_ != nullptr);
  membership_.reset();
  logs_->closeAll();
  workerStore_.reset();
  rendezvousStore_.reset();
  if (!scratch_.empty()) {
    std::error_code ignored;
    fs::remove_all(scratch_, ignored);
  }
  return exitCode_;
}

}  // namespace

int runAgent(const LaunchConfig& config, const std::map<std::string, std::string>& environment,
             Guardian* guardian) {
  Agent agent(config, environment, guardian);
  return agent.run();
}

}  // namespace ddprun::launcher
