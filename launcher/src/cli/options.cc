// The option table and what is derived from it. A long option is matched as argparse matches it
// (allow_abbrev): its exact spelling, else a unique prefix of either spelling.
#include "cli/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <vector>

#include "cli/cli.h"
#include "cli/helpers.h"
#include "ddprun/common/text.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// The values an option takes, none other (checkChoice), in the order shell completion offers them.
constexpr std::string_view kRendezvousBackends[] = {"static", "c10d", "etcd", "etcd-v2", "etcd-v3"};
constexpr std::string_view kStartMethods[] = {"spawn", "fork", "forkserver"};
constexpr std::string_view kEventLogHandlers[] = {"null", "console", "dynamic_rendezvous"};
constexpr std::string_view kLogsSpecs[] = {"default"};
constexpr std::string_view kNumaBindings[] = {
    numaAffinityName(NumaAffinity::kNode), numaAffinityName(NumaAffinity::kSocket),
    numaAffinityName(NumaAffinity::kExclusive), numaAffinityName(NumaAffinity::kCoreComplex)};
// Values offered by shell completion, among others the option takes.
constexpr std::string_view kWorkerCounts[] = {"cpu", "gpu", "xpu", "auto"};
constexpr std::string_view kStreams[] = {"0", "1", "2", "3"};
constexpr std::string_view kExitCodeSchemes[] = {"root-cause", "classes"};

// clang-format off
constexpr OptionSpec kOptions[] = {
  {.name = "help", .shortName = 'h', .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "Show this help and exit."},
  {.name = "version", .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "Show ddprun's version and exit.",
   .ddprunOwn = true},
  {.name = "nnodes",
   .help = "How many nodes (agents) take part: N, or MIN:MAX for an elastic job. Default: 1:1."},
  {.name = "spares", .kind = ValueKind::kInteger,
   .help = "ddprun: how many spare agents the job wants (c10d or etcd): agents started beyond "
           "the maximum of --nnodes join the store, start no workers and wait warm; the round "
           "after a node is lost takes one at once. `ddprun status` shows the spares waiting "
           "beside this count. Default: 0.",
   .ddprunOwn = true},
  {.name = "nproc-per-node", .suggestions = kWorkerCounts,
   .help = "Workers per node: a number, or cpu (CPU count), gpu (visible NVIDIA GPUs), xpu "
           "(Intel GPUs) or auto (GPUs if any, else CPUs). Default: 1."},
  {.name = "rdzv-backend", .choices = kRendezvousBackends,
   .help = "Rendezvous backend: static (--node-rank, --master-addr, --master-port), c10d "
           "(--rdzv-endpoint) or etcd (also etcd-v2, etcd-v3: an etcd 3.4+ cluster at "
           "--rdzv-endpoint, spoken to in its v3 API). Default: static."},
  {.name = "rdzv-endpoint",
   .help = "Rendezvous store address: HOST[:PORT] or [IPv6][:PORT]; the c10d port defaults to "
           "29400. Default for c10d: localhost:29400; for static: MASTER_ADDR:MASTER_PORT. "
           "etcd: its members, HOST[:PORT][,HOST[:PORT]...], each may start with http:// or "
           "https://, port 2379; default localhost:2379.",
   .address = true},
  {.name = "rdzv-id",
   .help = "Job id shared by every node; becomes TORCHELASTIC_RUN_ID. Default: none."},
  {.name = "rdzv-conf",
   .help = "Extra rendezvous settings as key=value,key=value, in seconds: join_timeout (600), "
           "last_call_timeout (30; also how long a job below MIN waits for new nodes), "
           "close_timeout (10), heartbeat_timeout, keep_alive_interval (1), "
           "keep_alive_max_attempt (5; with keep_alive_interval the node-liveness timeout, 5 s), "
           "timeout (static: the join timeout and how long a node waits for the master, "
           "900), read_timeout (60; also how long to wait for the endpoint), "
           "exit_barrier_timeout (300); and is_host (c10d only), store_type (tcp), use_libuv "
           "(ignored); etcd only: timeout (the join timeout), protocol (http, https), etcd_prefix "
           "(the keys' prefix, /), cacert, cert, key (or ca_cert, ssl_cert, ssl_cert_key: https "
           "files), and ddprun's own username=NAME,password_file=PATH for an etcd with auth "
           "(torchrun's etcd backends have none; the password alone in the file, mode 600; "
           "password= is refused: ps shows command lines); token_file=PATH: the job's secret (mode 600, "
           "the same file on every node and for ddprun-rendezvous --token-file): the stores then "
           "admit only connections that prove it, and workers reach them through a relay on "
           "127.0.0.1; with it, tls_cert=PATH,tls_key=PATH (and tls_ca=PATH, else the "
           "certificate is its own CA): every store connection between hosts is TLS as well. "
           "A key the backend does not read is ignored with a warning, whatever its value."},
  {.name = "standalone", .kind = ValueKind::kFlag,
   .help = "Single-node job with its own rendezvous on 127.0.0.1, a free port and a random "
           "run id; --rdzv-backend, --rdzv-endpoint and --rdzv-id are ignored."},
  {.name = "max-restarts", .kind = ValueKind::kInteger,
   .help = "How many times the worker group may be restarted after a failure. Default: 0."},
  {.name = "restart-backoff", .metavar = "INITIAL[:CAP]",
   .help = "ddprun: seconds to wait before a restart: INITIAL after a failure that followed "
           "progress, doubled for each further failure in a row without progress, at most CAP "
           "(default 16 x INITIAL). Every node waits the same. 0: restart at once. Default: 0.",
   .ddprunOwn = true},
  {.name = "max-no-progress-restarts", .kind = ValueKind::kInteger,
   .help = "ddprun: stop the job after this many restarts in a row whose rounds made no "
           "progress (see --progress-min-time), whatever --max-restarts has left. Default: 3.",
   .ddprunOwn = true},
  {.name = "max-node-failures", .kind = ValueKind::kInteger,
   .help = "ddprun: in an elastic job (c10d or etcd, --nnodes MIN:MAX with MIN < MAX, or with "
           "--spares), a node whose workers were the root cause of this many failures in a row "
           "leaves the job, and the others go on without it or with a spare in its place "
           "(unless that would leave fewer than MIN nodes, the spares wanted counted). 0: never. "
           "Default: 3.",
   .ddprunOwn = true},
  {.name = "progress-min-time", .kind = ValueKind::kNumber,
   .help = "ddprun: seconds after which a round counts as progress even without a heartbeat "
           "($DDPRUN_HEARTBEAT_FILE, --hang-timeout's) or a FileTimer request. 0: only those "
           "count. Default: 300.",
   .ddprunOwn = true},
  {.name = "no-restart-exit-code", .kind = ValueKind::kInteger,
   .help = "ddprun: a worker exiting with this code (1..255; e.g. 93, NVIDIA's resiliency "
           "extension's) stops the job at once as the user's error, without a restart. "
           "Default: none.",
   .ddprunOwn = true},
  {.name = "exit-codes", .choices = kExitCodeSchemes,
   .help = "ddprun: what a failed job exits with: root-cause (the root cause's exit code, as "
           "torchrun) or classes (80 the user's error, 81 restarts spent, 82 a machine fault, "
           "83 stopped from outside: for a scheduler's requeue rules; docs/errors.md). "
           "Default: root-cause.",
   .ddprunOwn = true},
  {.name = "monitor-interval", .kind = ValueKind::kNumber,
   .help = "Accepted for compatibility (seconds, > 0): ddprun learns of worker exits at once "
           "instead of polling. Default: 0.1."},
  {.name = "start-method", .metavar = "{spawn,fork,forkserver}", .choices = kStartMethods,
   .help = "Accepted for compatibility: torchrun's --run-path runs the script in a "
           "multiprocessing child started this way; ddprun starts every worker as a fresh "
           "process (as spawn does), so fork and forkserver make no difference. Default: spawn."},
  {.name = "event-log-handler", .choices = kEventLogHandlers,
   .help = "Where agent and rendezvous events go: null, console (the agent's log on stderr "
           "at info level, as LOGLEVEL=INFO) or dynamic_rendezvous (null). Default: null."},
  {.name = "role",
   .help = "Role name of the workers, shown in the [<role><local_rank>]: prefix. "
           "Default: default."},
  {.name = "module", .shortName = 'm', .kind = ValueKind::kFlag,
   .help = "Run training_script as a Python module, like 'python -m'."},
  {.name = "no-python", .kind = ValueKind::kFlag,
   .help = "Run training_script directly as an executable, without Python (executable files "
           "that are not .py are run directly even without it)."},
  {.name = "run-path", .kind = ValueKind::kFlag,
   .help = "Run training_script through Python's runpy.run_path in a child interpreter."},
  {.name = "log-dir",
   .help = "Base directory for the per-attempt, per-rank log files; created if missing."},
  {.name = "redirects", .shortName = 'r', .suggestions = kStreams,
   .help = "Send worker output to files in the log directory: 0 none, 1 stdout, 2 stderr, "
           "3 both, or per local rank, e.g. 0:3,1:1. Default: 0."},
  {.name = "tee", .shortName = 't', .suggestions = kStreams,
   .help = "Like --redirects, and also copy the output to the console. Default: 0."},
  {.name = "local-ranks-filter",
   .help = "Comma list of local ranks whose output reaches the console, e.g. 0,2. Default: all."},
  {.name = "duplicate-stdout-filters",
   .help = "Comma list of substrings (,, for a literal comma): stdout lines containing one are "
           "also written to filtered_stdout.log."},
  {.name = "duplicate-stderr-filters",
   .help = "Like --duplicate-stdout-filters, for stderr (filtered_stderr.log)."},
  {.name = "log-time", .kind = ValueKind::kFlag,
   .help = "ddprun: start each worker line on the console with the time it arrived, "
           "12:34:56.789 (local time, as the agent's own lines), before the prefix. The prefix "
           "template ($TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) may place it itself as ${time}; "
           "${elapsed} is the seconds since the agent started, ${attempt} the attempt "
           "(attempt_N in --log-dir).",
   .ddprunOwn = true},
  {.name = "node-rank", .kind = ValueKind::kInteger,
   .help = "This node's rank, 0..nnodes-1 (static backend only). Default: 0."},
  {.name = "master-addr",
   .help = "Address of the rank-0 node (static backend only). Default: 127.0.0.1."},
  {.name = "master-port", .kind = ValueKind::kInteger,
   .help = "Port of the store on the rank-0 node (static backend only). Default: 29500."},
  {.name = "local-addr",
   .help = "This node's address as the other nodes should reach it. Default: its FQDN."},
  {.name = "logs-specs", .hasEnvironment = false, .choices = kLogsSpecs,
   .help = "Only default: torch's built-in log specs (DefaultLogsSpecs), which is what ddprun "
           "does. torchrun loads any other name as a Python LogsSpecs plugin, and ddprun has no "
           "Python plugin host."},
  {.name = "numa-binding", .hasEnvironment = false,
   .metavar = "{node,socket,exclusive,core-complex}", .choices = kNumaBindings,
   .help = "Bind each worker to CPUs near the GPU of its local rank, as torchrun does (node: "
           "the GPU's NUMA node; socket: its socket; exclusive: the node's cores divided among "
           "its GPUs; core-complex: one last-level cache's cores). No numactl needed."},
  {.name = "signals-to-handle",
   .help = "Signals the agent catches and forwards to the workers. "
           "Default: SIGTERM,SIGINT,SIGHUP,SIGQUIT."},
  {.name = "shutdown-timeout", .kind = ValueKind::kNumber,
   .help = "Seconds between the forwarded signal and SIGKILL. Default: "
           "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30."},
  {.name = "hang-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: seconds without progress after which a worker that reported progress is "
           "hung: its stacks are recorded, it is killed and the group restarts as after any "
           "failure. Progress: the runtime library's collectives, or os.utime() of "
           "$DDPRUN_HEARTBEAT_FILE. 0: off. Default: 0.",
   .ddprunOwn = true},
  {.name = "hang-startup-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: with --hang-timeout, seconds a worker may take to its first progress "
           "report. 0: unbounded. Default: 600.",
   .ddprunOwn = true},
  {.name = "hang-native-stack-budget", .kind = ValueKind::kNumber,
   .help = "ddprun: seconds a hung worker's native stacks (eu-stack, else gdb; "
           "$DDPRUN_HANG_DEBUGGER names another) may take before it is killed; the kernel's "
           "view and the Python stack are always taken. Past it the evidence says they were "
           "not collected. 0: no native stacks. Default: 0.4.",
   .ddprunOwn = true},
  {.name = "exit-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: once a worker exited 0, seconds the node's other workers have to exit "
           "too; then they are hung at exit: their stacks are recorded, they are killed and the "
           "job fails without a restart. 0: wait for ever. Default: 300.",
   .ddprunOwn = true},
  {.name = "progress-pattern", .metavar = "REGEX",
   .help = "ddprun: a line a worker writes to stdout or stderr that matches this POSIX extended "
           "regular expression (grep -E) counts as its progress report, as a touch of "
           "$DDPRUN_HEARTBEAT_FILE does: --hang-timeout then needs no change to the script, "
           "e.g. 'step [0-9]+'. Default: none.",
   .ddprunOwn = true},
  {.name = "start-pattern", .metavar = "REGEX",
   .help = "ddprun: a worker that has written no line matching this regular expression "
           "--start-timeout seconds after its start is hung: its stacks are recorded, it is "
           "killed and the group restarts as after any failure, e.g. 'training started'. "
           "Default: none.",
   .ddprunOwn = true},
  {.name = "start-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: with --start-pattern, seconds a worker may take to its first matching "
           "line. Default: 600.",
   .ddprunOwn = true},
  {.name = "fail-pattern", .metavar = "REGEX",
   .help = "ddprun: a line a worker writes that matches this regular expression ends that "
           "worker as a failure of the user's class (the job stops, no restart); the summary "
           "names the pattern and the line, e.g. 'loss (nan|inf)'. Default: none.",
   .ddprunOwn = true},
  {.name = "health-check", .metavar = "CMD",
   .help = "ddprun: a shell command run before each round this node would join (after the "
           "built-in checks: each visible GPU through NVML when libnvidia-ml is there, and free "
           "space); exit 0 passes. A node that fails stays out of the round, says why, and "
           "checks again after --health-cooldown (docs/health.md). Default: none.",
   .ddprunOwn = true},
  {.name = "health-check-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: seconds --health-check and the round hooks may run before they are killed "
           "(a killed check or pre-round hook fails). Default: 60.",
   .ddprunOwn = true},
  {.name = "health-cooldown", .metavar = "INITIAL[:CAP]",
   .help = "ddprun: seconds a node that failed the health gate waits before it checks again: "
           "INITIAL, doubled for each further failure in a row, at most CAP (default 16 x "
           "INITIAL). Default: 30.",
   .ddprunOwn = true},
  {.name = "health-min-free-mb", .kind = ValueKind::kNumber,
   .help = "ddprun: MiB that must be free in the log dir, TMPDIR and /dev/shm for the node to "
           "pass the health gate. 0: not checked. Default: 16.",
   .ddprunOwn = true},
  {.name = "pre-round-hook", .metavar = "CMD",
   .help = "ddprun: a shell command run after the health gate, before this node joins a round "
           "and starts its workers (hyperpodrun's --pre-train-script); failing is failing the "
           "gate. Its output goes into the agent's log, each line prefixed [--pre-round-hook]. "
           "Default: none.",
   .ddprunOwn = true},
  {.name = "post-round-hook", .metavar = "CMD",
   .help = "ddprun: a shell command run once a round's workers have ended; its exit code is "
           "logged, never fatal. Its output goes into the agent's log, each line prefixed "
           "[--post-round-hook]. Default: none.",
   .ddprunOwn = true},
  {.name = "virtual-local-rank", .kind = ValueKind::kFlag,
   .help = "Give every worker LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES set to its one GPU."},
  {.name = "hosts", .hasEnvironment = false, .metavar = "HOST,HOST...",
   .help = "ddprun: run the job on these hosts, one agent each, started over ssh from here "
           "(docs/ssh.md): c10d rendezvous on the first host (port 29400) unless --rdzv-endpoint "
           "or --master-addr says otherwise, a generated --rdzv-id, --nnodes the number of "
           "hosts. Output comes back line by line as 'HOST: ...'.",
   .ddprunOwn = true},
  {.name = "hostfile", .hasEnvironment = false,
   .help = "ddprun: like --hosts, the hosts from a file in DeepSpeed's format: 'HOST slots=N' "
           "lines, '#' comments. Without --nproc-per-node each host runs N workers.",
   .ddprunOwn = true},
  {.name = "include", .hasEnvironment = false, .metavar = "HOST[:SLOT,...]@HOST...",
   .help = "ddprun: with --hosts/--hostfile, only these hosts, and on a host with slots listed "
           "only those GPUs (its CUDA_VISIBLE_DEVICES and worker count), as DeepSpeed's -i.",
   .ddprunOwn = true},
  {.name = "exclude", .hasEnvironment = false, .metavar = "HOST[:SLOT,...]@HOST...",
   .help = "ddprun: with --hosts/--hostfile, every host but these (or, with slots, without "
           "those GPUs), as DeepSpeed's -e. Not with --include.",
   .ddprunOwn = true},
  {.name = "forward-env", .hasEnvironment = false, .metavar = "NAME,NAME...",
   .help = "ddprun: with --hosts/--hostfile, variables set on every host besides NCCL_*, "
           "PYTHON* and CUDA_VISIBLE_DEVICES (forwarded where set).",
   .ddprunOwn = true},
  {.name = "ssh-options", .hasEnvironment = false, .metavar = "'OPTIONS'",
   .help = "ddprun: with --hosts/--hostfile, options for ssh, split at blanks (e.g. '-i key "
           "-o ConnectTimeout=5'); they win over ddprun's (BatchMode=yes, ConnectTimeout=10). "
           "Default: $DDPRUN_SSH_OPTIONS.",
   .ddprunOwn = true},
  {.name = "ssh-ddprun", .hasEnvironment = false, .metavar = "PATH",
   .help = "ddprun: with --hosts/--hostfile, ddprun's path on the hosts. Default: "
           "$DDPRUN_REMOTE_BIN, else this ddprun's own path.",
   .ddprunOwn = true},
  {.name = "stop-on-stdin-eof", .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "ddprun, set by --hosts on each host's agent: a byte on stdin is a signal passed on; "
           "the end of stdin (the ssh connection gone) stops the job on this host as SIGTERM "
           "does.",
   .ddprunOwn = true},
  {.name = "token-from-stdin", .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "ddprun, set by --hosts on each host's agent: the job's token is the first line on "
           "stdin (the driver writes it there), instead of --rdzv-conf token_file.",
   .ddprunOwn = true},
};
// clang-format on

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown option --nprocs; did you mean --nproc-per-node?": the nearest name, in the spelling
// the user typed, when one is near enough to be a typo.
std::string unknownOptionMessage(std::string_view spelling) {
  const std::string_view name = spelling.substr(2);
  const bool underscores = name.find('_') != std::string_view::npos;
  std::string best;
  std::size_t bestDistance = std::max<std::size_t>(2, name.size() / 4) + 1;
  for (const auto& spec : kOptions) {
    const std::string candidate = underscores ? underscored(spec.name) : std::string(spec.name);
    const std::size_t distance = editDistance(name, candidate);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  if (best.empty()) return fmt::format("unknown option {}; see ddprun --help", printable(spelling));
  return fmt::format("unknown option {}; did you mean --{}?", printable(spelling), best);
}

// argparse's words: "ambiguous option: --nproc could match --nproc-per-node, --nproc_per_node",
// and the fix.
std::string ambiguousOptionMessage(std::string_view spelling,
                                   const std::vector<LongOptionMatch::Candidate>& candidates) {
  std::string names;
  for (const auto& candidate : candidates) {
    names += fmt::format("{}--{}", names.empty() ? "" : ", ", candidate.spelling);
  }
  return fmt::format("ambiguous option: {} could match {}; write more of the option's name",
                     printable(spelling), names);
}

// Joins words that wrap() must keep on one line ("[env PET_X]"); turned back into a space after.
constexpr char kNoBreakSpace = '\x01';

std::string wrap(std::string_view text, std::size_t indent, std::size_t width) {
  std::string out;
  std::size_t column = indent;
  bool first = true;
  for (const auto word : split(text, ' ')) {
    if (word.empty()) continue;
    if (!first && column + 1 + word.size() > width) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  std::replace(out.begin(), out.end(), kNoBreakSpace, ' ');
  return out;
}

// argparse's layout: invocation in column 2, help in column 24 (on the next line when the
// invocation is too wide).
void appendHelpItem(std::string& out, const std::string& invocation, std::string_view help) {
  constexpr std::size_t kHelpColumn = 24;
  constexpr std::size_t kWidth = 100;
  out += "  " + invocation;
  if (invocation.size() + 2 + 2 <= kHelpColumn) {
    out.append(kHelpColumn - invocation.size() - 2, ' ');
  } else {
    out += '\n';
    out.append(kHelpColumn, ' ');
  }
  out += wrap(help, kHelpColumn, kWidth);
  out += '\n';
}

}  // namespace

std::span<const OptionSpec> options() { return kOptions; }

std::string underscored(std::string_view name) {
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

std::string environmentName(const OptionSpec& spec) {
  return "PET_" + upperCase(underscored(spec.name));
}

std::string metavar(const OptionSpec& spec) {
  return spec.metavar.empty() ? upperCase(underscored(spec.name)) : std::string(spec.metavar);
}

const OptionSpec& optionNamed(std::string_view name) {
  const auto it = std::find_if(std::begin(kOptions), std::end(kOptions),
                               [&](const OptionSpec& spec) { return spec.name == name; });
  if (it == std::end(kOptions)) throw std::logic_error("no option --" + std::string(name));
  return *it;
}

LongOptionMatch matchLongOption(std::string_view name, std::span<const OptionSpec> table) {
  LongOptionMatch match;
  for (const auto& spec : table) {
    if (name == spec.name || name == underscored(spec.name)) {
      match.option = &spec;
      return match;
    }
  }
  if (name.empty()) return match;
  for (const auto& spec : table) {
    const std::string dashed(spec.name);
    const std::string other = underscored(spec.name);
    if (dashed.starts_with(name)) match.candidates.push_back({&spec, dashed});
    if (other != dashed && other.starts_with(name)) match.candidates.push_back({&spec, other});
  }
  const bool torchruns = std::any_of(match.candidates.begin(), match.candidates.end(),
                                     [](const auto& c) { return !c.option->ddprunOwn; });
  if (torchruns) {
    std::erase_if(match.candidates, [](const auto& c) { return c.option->ddprunOwn; });
  }
  if (match.candidates.size() == 1) match.option = match.candidates.front().option;
  return match;
}

const OptionSpec& longOption(std::string_view spelling) {
  const LongOptionMatch match = matchLongOption(spelling.substr(2), kOptions);
  if (match.option != nullptr) return *match.option;
  if (match.candidates.size() > 1) {
    throw UsageError(ambiguousOptionMessage(spelling, match.candidates));
  }
  throw UsageError(unknownOptionMessage(spelling));
}

const OptionSpec* shortOption(char letter) {
  for (const auto& spec : kOptions) {
    if (spec.shortName != 0 && spec.shortName == letter) return &spec;
  }
  return nullptr;
}

std::string helpText() {
  std::string out = fmt::format(
      "usage: ddprun [options] training_script [training_script_args ...]\n\n"
      "ddprun {}: a native drop-in replacement for torchrun (Torch Distributed Elastic Training "
      "Launcher).\nEach option not given falls back to its PET_ environment variable "
      "(e.g. PET_NPROC_PER_NODE).\nA long option may be shortened to any unique prefix, as with "
      "torchrun (--nproc_per 2).\nOptions end at training_script (or at --); what follows it "
      "is passed to it untouched.\n\npositional arguments:\n",
      DDPRUN_VERSION);
  appendHelpItem(out, "training_script",
                 "The script to run: a .py file, a module name (-m), or an executable.");
  appendHelpItem(out, "training_script_args", "Arguments for the training script, untouched.");
  out += "\noptions:\n";
  for (const auto& spec : kOptions) {
    const std::string suffix = spec.kind == ValueKind::kFlag ? "" : " " + metavar(spec);
    std::vector<std::string> spellings;
    if (spec.shortName != 0) spellings.push_back(fmt::format("-{}{}", spec.shortName, suffix));
    spellings.push_back(fmt::format("--{}{}", spec.name, suffix));
    if (spec.name.find('-') != std::string_view::npos) {
      spellings.push_back(fmt::format("--{}{}", underscored(spec.name), suffix));
    }
    std::string invocation;
    for (const auto& spelling : spellings) {
      invocation += (invocation.empty() ? "" : ", ") + spelling;
    }
    std::string help(spec.help);
    if (spec.hasEnvironment) {
      help += fmt::format(" [env{}{}]", kNoBreakSpace, environmentName(spec));
    }
    appendHelpItem(out, invocation, help);
  }
  return out;
}

}  // namespace ddprun::launcher::cli_detail
