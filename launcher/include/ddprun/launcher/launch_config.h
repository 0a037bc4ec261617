// LaunchConfig: everything one `ddprun` invocation asks for, after the command line and the
// PET_* environment have been parsed and validated (cli.h). Plain data with torchrun 2.x's
// defaults; every other part of the agent reads its settings from here.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::launcher {

// --exit-codes: what a failed job exits with (docs/errors.md, "Exit codes of ddprun").
enum class ExitCodeScheme {
  kRootCause,  // the root cause's exit code, or 128 + signal (torchrun-compatible)
  kClasses,    // one code per failure class, for schedulers: 80 user, 81 budget spent, ...
};

enum class RdzvBackend {
  kStatic,  // --node-rank / --master-addr / --master-port; node rank 0 hosts the store
  kC10d,    // --rdzv-endpoint host:port; a store on the endpoint (agent-hosted or a daemon)
  kEtcd,    // --rdzv-endpoint host:port[,...]: an etcd cluster, spoken to in its v3 API
            // (etcd, etcd-v2 and etcd-v3 all select it)
};

// The backend's name, as --rdzv-backend takes it (etcd for all three spellings): for messages and
// torchrun's events.
inline const char* rdzvBackendName(RdzvBackend backend) {
  switch (backend) {
    case RdzvBackend::kStatic:
      return "static";
    case RdzvBackend::kC10d:
      return "c10d";
    case RdzvBackend::kEtcd:
      return "etcd";
  }
  return "?";
}

// --numa-binding: torchrun 2.9+'s AffinityMode (torch/numa/binding.py), each worker bound to CPUs
// near the GPU whose index is its local rank (docs/numa.md says which CPUs).
enum class NumaAffinity {
  kNone,         // not given: the workers keep the agent's CPUs
  kNode,         // the CPUs of the GPU's NUMA node
  kSocket,       // the CPUs of every NUMA node of the GPU's socket
  kExclusive,    // the GPU's node's physical cores, divided among the GPUs on that node
  kCoreComplex,  // one group of cores sharing the last-level cache on the GPU's node
};

// The mode's name as --numa-binding takes it ("" for kNone).
constexpr const char* numaAffinityName(NumaAffinity mode) {
  switch (mode) {
    case NumaAffinity::kNode:
      return "node";
    case NumaAffinity::kSocket:
      return "socket";
    case NumaAffinity::kExclusive:
      return "exclusive";
    case NumaAffinity::kCoreComplex:
      return "core-complex";
    case NumaAffinity::kNone:
      break;
  }
  return "";
}

// How the training script is started (torchrun's four modes, plus executables run directly).
enum class EntryKind {
  kPythonScript,  // <python> -u script.py args
  kPythonModule,  // <python> -u -m module args            (-m)
  kExecutable,    // script args                            (--no-python, or any executable file)
  kRunPath,       // <python> -u -c <runpy.run_path(script)> args   (--run-path)
};

// Which of a worker's standard streams a setting applies to.
struct StdStreams {
  bool out = false;
  bool err = false;
  bool operator==(const StdStreams&) const = default;
};

// torchrun's -r/--redirects and -t/--tee value: "0".."3" for every local rank, or a per-rank map
// such as "0:1,1:3" (ranks not listed: nothing). ddprun accepts multi-digit ranks.
struct StreamSelection {
  StdStreams all;
  std::map<int, StdStreams> perRank;
  bool perRankGiven = false;
  StdStreams forRank(int localRank) const {
    if (!perRankGiven) return all;
    auto it = perRank.find(localRank);
    return it == perRank.end() ? StdStreams{} : it->second;
  }
  bool operator==(const StreamSelection&) const = default;
};

// --rdzv-conf, typed, with torchrun's key names. Each default is written here once; the CLI
// fills what was given (durations in seconds on the command line) and nothing downstream parses
// text again. Differences from torchrun: keep-alives every second (not 5), and the static
// backend's `timeout` is its join timeout (the CLI resolves it into joinTimeout).
struct RendezvousSettings {
  std::chrono::milliseconds joinTimeout{600000};     // join_timeout: a round must form in this
  std::chrono::milliseconds lastCallTimeout{30000};  // last_call_timeout: wait for more nodes
  std::chrono::milliseconds closeTimeout{10000};     // close_timeout: the host waits for the others
  std::chrono::milliseconds keepAliveInterval{1000};  // keep_alive_interval
  // keep_alive_max_attempt. With the interval it makes the node-liveness timeout (5 s): a node
  // silent that long is lost, and a network blip shorter than about 2/5 of it (2 s by default:
  // TCP's retransmission backoff can deliver a renewal sent during the blip up to ~2x its length
  // late) is ridden out with no restart.
  int keepAliveMaxAttempts = 5;
  std::chrono::milliseconds readTimeout{60000};  // read_timeout: reaching the store, any call
  std::optional<std::chrono::milliseconds>
      heartbeatTimeout;  // heartbeat_timeout (default: the hold's lifetime)
  std::chrono::milliseconds exitBarrierTimeout{300000};  // exit_barrier_timeout (ddprun extra)
  std::optional<bool> isHost;  // is_host: nothing = decide by the endpoint
  std::string tokenFile;       // token_file: the job's secret ("" = none)
  // TLS for every store connection that crosses the network (with a token only; "" = none):
  std::string tlsCert;  // tls_cert: the stores' certificate (PEM), every agent may host one
  std::string tlsKey;   // tls_key: its key (mode 600)
  std::string tlsCa;    // tls_ca: the CA that signed it ("" = the certificate itself)
  // etcd only (torch's etcd backends' keys; both spellings of each file are taken):
  std::string etcdPrefix;  // etcd_prefix: under it every key of the job ("" = the root, "/")
  std::string etcdCaCert;  // cacert, ca_cert: the CA of https members ("" = the system's)
  std::string etcdCert;    // cert, ssl_cert: a client certificate, for --client-cert-auth members
  std::string etcdKey;     // key, ssl_cert_key: its key (mode 600)
  std::optional<bool> etcdHttps;  // protocol: http or https for entries written without a scheme
  // ddprun's own (torch's etcd backends take no credentials), for an etcd with auth enabled;
  // both or neither. The password is never on the command line: the agent reads the file.
  std::string etcdUser;          // username: the etcd user
  std::string etcdPasswordFile;  // password_file: its password (mode 600)

  // The node-liveness timeout: how long a node's alive hold lasts without renewal; after this a
  // silent node is lost.
  std::chrono::milliseconds holdTimeToLive() const {
    return keepAliveInterval * keepAliveMaxAttempts;
  }

  // Fencing (docs/architecture.md, "Liveness and fencing"): an agent whose last acknowledged
  // liveness renewal was SENT longer ago than fencingInterval() stops its workers and writes no
  // more to its round, before the store can count it lost and the others start a new group:
  //
  //   F = T - 2*kFenceRoundTrip - kFenceMargin        (T = holdTimeToLive())
  //
  // The store starts a hold's time to live when it *receives* a renewal, after the agent sent it,
  // so the hold lapses no earlier than send + T, and the survivors' new group starts later still.
  // Measured from the send, F < T is safe whatever the trip took (measured from the reply, the
  // receipt could be a whole trip earlier: that is what the round trips in this rule pay for).
  // The two trips are kept as slack for what is on the wire when the workers are killed (a
  // worker's last request and its reply); kFenceMargin covers the fence's timer running late on a
  // busy loop and SIGKILL taking the workers' trees down (tens of ms; a CUDA process's teardown
  // can take a few hundred). A renewal acknowledged after a long trip still counts from its send.
  // Defaults: T = 5 s, F = 4.5 s. A 2 s blip, which TCP's backoff can stretch into a renewal
  // acknowledged ~4.0 s after the send of the last one before it, is still ridden out.
  static constexpr std::chrono::milliseconds kFenceRoundTrip{100};
  static constexpr std::chrono::milliseconds kFenceMargin{300};
  std::chrono::milliseconds fencingInterval() const {
    return holdTimeToLive() - 2 * kFenceRoundTrip - kFenceMargin;
  }
  bool operator==(const RendezvousSettings&) const = default;
};

// How the nodes find each other.
struct RendezvousConfig {
  RdzvBackend backend = RdzvBackend::kStatic;
  int minNodes = 1;  // --nnodes N or MIN:MAX
  int maxNodes = 1;
  // --spares: how many agents over MAX the job wants waiting warm for a lost node's place (shown
  // by `ddprun status`; an agent over MAX is a spare whatever this says).
  int spares = 0;
  std::string endpoint;        // --rdzv-endpoint as given ("" = none)
  std::string host;            // parsed endpoint host (brackets removed for IPv6)
  std::uint16_t port = 0;      // parsed endpoint port (c10d default 29400)
  std::string runId = "none";  // --rdzv-id; becomes TORCHELASTIC_RUN_ID
  bool standalone = false;     // --standalone: c10d on 127.0.0.1:0, random run id
  // Where the port came from when the user did not give it, and how to change it, for the line
  // that says it is taken ("<port> is derived from ...; set ..."): "" = given by the user.
  std::string endpointSource;
  RendezvousSettings settings;  // --rdzv-conf
  // static rendezvous
  int nodeRank = 0;                         // --node-rank
  std::string masterAddr = "127.0.0.1";     // --master-addr
  std::optional<std::uint16_t> masterPort;  // --master-port (nothing = 29500)
  std::string localAddr;                    // --local-addr ("" = detect)
  // etcd: the members' client URLs from --rdzv-endpoint (host and port above: the first one's)
  std::vector<rendezvous::etcd::EtcdEndpoint> etcdEndpoints;
};

// When and how the job restarts and stops.
struct RestartPolicy {
  int maxRestarts = 0;           // for the whole job, not per node
  double monitorInterval = 0.1;  // accepted for compatibility; ddprun is event-driven
  std::chrono::milliseconds shutdownTimeout{30000};  // SIGTERM -> SIGKILL grace
  std::vector<int> signalsToHandle = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // --restart-backoff INITIAL[:CAP]: the wait before a restart is INITIAL * 2^(n-1), n the
  // failures in a row without progress (this one counted), capped at CAP (0 = no wait).
  std::chrono::milliseconds backoffInitial{0};
  std::chrono::milliseconds backoffCap{0};
  // --max-no-progress-restarts: restarts in a row without progress before the job stops.
  int maxNoProgressRestarts = 3;
  // --no-restart-exit-code: a worker exiting with it stops the job at once (nothing = off).
  std::optional<int> noRestartExitCode;
  // --progress-min-time: a round that ran this long made progress (0 = only a heartbeat or a
  // FileTimer request counts).
  std::chrono::milliseconds progressMinTime{300000};
  // --max-node-failures: in an elastic job, a node that was the root cause's this many times in a
  // row leaves the job (0 = off; docs/errors.md says why 3).
  int maxNodeFailures = 3;
  // --exit-codes: the root cause's code (torchrun's) or the failure classes' (core/exit_codes.h).
  ExitCodeScheme exitCodes = ExitCodeScheme::kRootCause;
};

// When a worker that has not exited counts as hung (ddprun's own; docs/errors.md, "Hangs").
struct HangPolicy {
  // --hang-timeout: a worker that reported progress and then reports none for this long is hung
  // (nothing = off).
  std::optional<std::chrono::milliseconds> hangTimeout;
  // --hang-startup-timeout: with a hang timeout, how long a worker may take to its first report
  // (nothing = as long as it likes).
  std::optional<std::chrono::milliseconds> startupTimeout = std::chrono::minutes(10);
  // --exit-timeout: once a worker exited 0, how long the others of the node may take to exit
  // too (nothing = for ever). Long enough for a rank that writes the checkpoint last.
  std::optional<std::chrono::milliseconds> exitTimeout = std::chrono::minutes(5);
  // --hang-native-stack-budget: how long a hung worker's native stacks may take before it is
  // killed (0 = none taken). Short by default: the kill, and so the restart, wait for them.
  std::chrono::milliseconds nativeStackBudget{400};
  // Progress from the workers' output lines (docs/errors.md, "Progress from log lines"): POSIX
  // extended regular expressions matched against each line a worker writes to stdout or stderr
  // ("" = none). --progress-pattern: a matching line is a progress report (as a heartbeat).
  std::string progressPattern;
  // --start-pattern: a worker that wrote no matching line within startTimeout of its start is
  // hung (HangKind::kNoStart).
  std::string startPattern;
  std::chrono::milliseconds startTimeout = std::chrono::minutes(10);  // --start-timeout
  // --fail-pattern: a matching line ends the worker as a failure of the user's class
  // (HangKind::kFailPattern).
  std::string failPattern;
  bool anyLinePattern() const {
    return !progressPattern.empty() || !startPattern.empty() || !failPattern.empty();
  }
};

// The health gate before each round (launcher/src/health/, docs/health.md).
struct HealthPolicy {
  // --health-check: a shell command run before each join; exit 0 passes ("" = none).
  std::string checkCommand;
  // --health-check-timeout: the hooks are killed (and fail) after this long.
  std::chrono::milliseconds hookTimeout{60000};
  // --health-cooldown INITIAL[:CAP]: a node that failed the gate tries again after INITIAL *
  // 2^(n-1), n its failures in a row, at most CAP.
  std::chrono::milliseconds cooldownInitial{30000};
  std::chrono::milliseconds cooldownCap{480000};
  // --pre-round-hook: run after the gate, before the join (failing = failing the gate).
  std::string preRoundCommand;
  // --post-round-hook: run once a round's workers have ended (its exit code logged only).
  std::string postRoundCommand;
  // --health-min-free-mb: the free space the log dir, TMPDIR and /dev/shm need (0 = unchecked).
  std::uint64_t minFreeBytes = 16ull << 20;
};

// What each worker runs.
struct EntryPoint {
  EntryKind kind = EntryKind::kPythonScript;
  std::string python;  // interpreter for Python modes: $PYTHON_EXEC or python3 on PATH
  std::string script;  // script path, module name or executable (as given)
  // kExecutable only: the file to exec, resolved at parse time the way execvp would (PATH
  // lookup for a bare name) except that an executable found in the working directory under a
  // bare name becomes "./name" (execvp would search PATH instead). argv[0] stays `script`.
  std::string executable;
  std::vector<std::string> args;      // passed through untouched
  std::string startMethod = "spawn";  // accepted; only meaningful for --run-path
};

// Where the workers' output goes.
struct LogSettings {
  std::string dir;                                  // --log-dir ("" = none)
  StreamSelection redirects;                        // -r/--redirects
  StreamSelection tee;                              // -t/--tee
  std::optional<std::set<int>> localRanksFilter;    // --local-ranks-filter (nothing = all)
  std::vector<std::string> duplicateStdoutFilters;  // --duplicate-stdout-filters
  std::vector<std::string> duplicateStderrFilters;  // --duplicate-stderr-filters
  // --log-time: the workers' console lines start with the time they arrived (${time} put before
  // the prefix, unless the prefix template has it already).
  bool time = false;
};

struct LaunchConfig {
  int nprocPerNode = 1;                // --nproc-per-node: resolved count (cpu/gpu/auto resolved)
  std::string nprocPerNodeSpec = "1";  // as given, for messages and logs
  RendezvousConfig rdzv;
  RestartPolicy restart;
  HangPolicy hang;
  HealthPolicy health;
  EntryPoint entry;
  LogSettings logs;
  std::string role = "default";                    // --role
  std::string eventLogHandler = "null";            // --event-log-handler
  NumaAffinity numaBinding = NumaAffinity::kNone;  // --numa-binding
  // The CPUs each worker is bound to, by local rank: planned by the agent at start from
  // --numa-binding and this node's topology (placement/numa_plan.h); empty: no binding.
  std::vector<std::vector<int>> workerCpus;
  bool virtualLocalRank = false;  // --virtual-local-rank
  // --stop-on-stdin-eof: set by the ssh driver on each remote agent (docs/ssh.md): a byte on
  // stdin is a signal passed on, EOF stops the agent as SIGTERM does.
  bool stopOnStdinEof = false;
  // --token-from-stdin: set by the ssh driver on each remote agent when the job's token is one it
  // made: the agent reads it from the first line on stdin, before anything else (docs/ssh.md).
  bool tokenFromStdin = false;
};

// The most workers one node may run: --nproc-per-node above it is refused at start, and a node
// record that claims more is refused by the others (a typo or a forgery).
inline constexpr int kMaxNprocPerNode = 1 << 16;

// The static backend's default port, and c10d's default endpoint port.
inline constexpr std::uint16_t kDefaultMasterPort = 29500;
inline constexpr std::uint16_t kDefaultC10dPort = 29400;

}  // namespace ddprun::launcher
