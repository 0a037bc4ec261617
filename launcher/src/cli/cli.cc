// The ddprun command line. Three stages:
//
//   1. splitArguments: walks argv with the option table to find where ddprun's own options end
//      (the first positional argument, or "--"). Everything from the training script on is never
//      looked at again, so script arguments such as "--nproc-per-node 9" or "-m" cannot be taken
//      for ddprun options (torchrun's argparse can: pytorch issue #120601).
//   2. PET_<DEST> fallbacks are merged in for options the command line did not give, and every
//      value goes through Boost.Program_options for conversion to its type.
//   3. buildConfig: semantic validation and resolution (nproc, endpoints, the entry point, host
//      names, files) into a LaunchConfig. Every failure is a one-line UsageError that names where
//      the value came from (the option as typed, or the PET_ variable) and how to fix it.
#include "cli/cli.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "ddprun/common/path_lookup.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

namespace po = boost::program_options;
using Environment = std::map<std::string, std::string>;
using common::printable;

// ------------------------------------------------------------------------------------------------
// Small text helpers

constexpr std::string_view kWhitespace = " \t\r\n\v\f";

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(kWhitespace);
  return text.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::string lowerCase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string upperCase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

std::string quote(std::string_view text) { return "'" + printable(text) + "'"; }

// A whole number: optional '-', digits, nothing else (surrounding blanks allowed, as Python's
// int() allows them in PET_ values). No '+', no "3.0", no overflow.
std::optional<long long> parseWholeNumber(std::string_view text) {
  text = trim(text);
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || next != end) return std::nullopt;
  return value;
}

std::optional<double> parseFiniteNumber(std::string_view text) {
  text = trim(text);
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || next != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::uint16_t> parsePort(std::string_view text) {
  if (text.empty() || text.size() > 5 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  const auto value = parseWholeNumber(text);
  if (!value || *value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(*value);
}

const std::string* lookup(const Environment& environment, const std::string& name) {
  const auto it = environment.find(name);
  return it == environment.end() ? nullptr : &it->second;
}

// ------------------------------------------------------------------------------------------------
// The option table: one row per torchrun option. The dashed name is the canonical key; the
// underscore spelling, the PET_ variable and the argparse-style metavar are derived from it.

enum class ValueKind { kFlag, kText, kInteger, kNumber };

struct OptionSpec {
  std::string_view name{};  // dashed long name without "--"
  char shortName = 0;       // -m, -r, -t, -h
  ValueKind kind = ValueKind::kText;
  bool hasEnvironment = true;  // falls back to PET_<NAME>
  std::string_view metavar{};  // "" = the name upper-cased, as argparse prints it
  std::string_view help{};
};

// clang-format off
constexpr OptionSpec kOptions[] = {
  {.name = "help", .shortName = 'h', .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "Show this help and exit."},
  {.name = "version", .kind = ValueKind::kFlag, .hasEnvironment = false,
   .help = "Show ddprun's version and exit."},
  {.name = "nnodes",
   .help = "How many nodes (agents) take part: N, or MIN:MAX for an elastic job. Default: 1:1."},
  {.name = "nproc-per-node",
   .help = "Workers per node: a number, or cpu (CPU count), gpu (visible NVIDIA GPUs), xpu "
           "(Intel GPUs) or auto (GPUs if any, else CPUs). Default: 1."},
  {.name = "rdzv-backend",
   .help = "Rendezvous backend: static (--node-rank, --master-addr, --master-port) or c10d "
           "(--rdzv-endpoint). Default: static."},
  {.name = "rdzv-endpoint",
   .help = "Rendezvous store address: HOST[:PORT] or [IPv6][:PORT]; the c10d port defaults to "
           "29400. Default for c10d: localhost:29400; for static: MASTER_ADDR:MASTER_PORT."},
  {.name = "rdzv-id",
   .help = "Job id shared by every node; becomes TORCHELASTIC_RUN_ID. Default: none."},
  {.name = "rdzv-conf",
   .help = "Extra rendezvous settings as key=value,key=value, in seconds: join_timeout (600), "
           "last_call_timeout (30; also how long a job below MIN waits for new nodes), "
           "close_timeout (10), heartbeat_timeout, keep_alive_interval (1), "
           "keep_alive_max_attempt (5; with keep_alive_interval the node-liveness timeout, 5 s), timeout (static: the join timeout and how long a node waits for the master, 900), read_timeout (60; "
           "also how long to wait for the endpoint), exit_barrier_timeout (300); and is_host, "
           "store_type (tcp), use_libuv (ignored); token_file=PATH: the job's secret (mode 600, "
           "the same file on every node and for ddprun-rendezvous --token-file): the stores then "
           "admit only connections that prove it, and workers reach them through a relay on "
           "127.0.0.1; with it, tls_cert=PATH,tls_key=PATH (and tls_ca=PATH, else the "
           "certificate is its own CA): every store connection between hosts is TLS as well."},
  {.name = "standalone", .kind = ValueKind::kFlag,
   .help = "Single-node job with its own rendezvous on 127.0.0.1, a free port and a random "
           "run id; --rdzv-backend, --rdzv-endpoint and --rdzv-id are ignored."},
  {.name = "max-restarts", .kind = ValueKind::kInteger,
   .help = "How many times the worker group may be restarted after a failure. Default: 0."},
  {.name = "monitor-interval", .kind = ValueKind::kNumber,
   .help = "Accepted for compatibility (seconds, > 0): ddprun learns of worker exits at once "
           "instead of polling. Default: 0.1."},
  {.name = "start-method", .metavar = "{spawn,fork,forkserver}",
   .help = "Accepted for compatibility: torchrun's --run-path runs the script in a "
           "multiprocessing child started this way; ddprun starts every worker as a fresh "
           "process (as spawn does), so fork and forkserver make no difference. Default: spawn."},
  {.name = "event-log-handler",
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
  {.name = "redirects", .shortName = 'r',
   .help = "Send worker output to files in the log directory: 0 none, 1 stdout, 2 stderr, "
           "3 both, or per local rank, e.g. 0:3,1:1. Default: 0."},
  {.name = "tee", .shortName = 't',
   .help = "Like --redirects, and also copy the output to the console. Default: 0."},
  {.name = "local-ranks-filter",
   .help = "Comma list of local ranks whose output reaches the console, e.g. 0,2. Default: all."},
  {.name = "duplicate-stdout-filters",
   .help = "Comma list of substrings (,, for a literal comma): stdout lines containing one are "
           "also written to filtered_stdout.log."},
  {.name = "duplicate-stderr-filters",
   .help = "Like --duplicate-stdout-filters, for stderr (filtered_stderr.log)."},
  {.name = "node-rank", .kind = ValueKind::kInteger,
   .help = "This node's rank, 0..nnodes-1 (static backend only). Default: 0."},
  {.name = "master-addr",
   .help = "Address of the rank-0 node (static backend only). Default: 127.0.0.1."},
  {.name = "master-port", .kind = ValueKind::kInteger,
   .help = "Port of the store on the rank-0 node (static backend only). Default: 29500."},
  {.name = "local-addr",
   .help = "This node's address as the other nodes should reach it. Default: its FQDN."},
  {.name = "logs-specs", .hasEnvironment = false,
   .help = "Not supported: torchrun loads a Python LogsSpecs plugin here, and ddprun has no "
           "Python plugin host."},
  {.name = "numa-binding", .hasEnvironment = false,
   .metavar = "{node,socket,exclusive,core-complex}",
   .help = "Bind each worker with numactl to the CPUs and memory nearest its GPU."},
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
           "$DDPRUN_HEARTBEAT_FILE. 0: off. Default: 0."},
  {.name = "hang-startup-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: with --hang-timeout, seconds a worker may take to its first progress "
           "report. 0: unbounded. Default: 600."},
  {.name = "exit-timeout", .kind = ValueKind::kNumber,
   .help = "ddprun: once a worker exited 0, seconds the node's other workers have to exit "
           "too; then they are hung at exit: their stacks are recorded, they are killed and the "
           "job fails without a restart. 0: wait for ever. Default: 300."},
  {.name = "virtual-local-rank", .kind = ValueKind::kFlag,
   .help = "Give every worker LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES set to its one GPU."},
};
// clang-format on

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

// Exact match only, in either spelling: prefix abbreviations are a source of surprises
// (--r=16 after the script taken as a torchrun option), so unlike argparse there are none.
const OptionSpec* findLong(std::string_view name) {
  for (const auto& spec : kOptions) {
    if (name == spec.name || name == underscored(spec.name)) return &spec;
  }
  return nullptr;
}

const OptionSpec* findShort(char name) {
  for (const auto& spec : kOptions) {
    if (spec.shortName != 0 && spec.shortName == name) return &spec;
  }
  return nullptr;
}

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

// "unknown option --nproc; did you mean --nproc-per-node?": a prefix of a real option (what
// argparse would have accepted as an abbreviation) or a near miss.
std::string unknownOptionMessage(std::string_view spelling) {
  const std::string_view name = spelling.substr(2);
  const bool underscores = name.find('_') != std::string_view::npos;
  std::string best;
  std::size_t bestDistance = std::max<std::size_t>(2, name.size() / 4) + 1;
  for (const auto& spec : kOptions) {
    const std::string candidate = underscores ? underscored(spec.name) : std::string(spec.name);
    if (name.size() >= 2 && std::string_view(candidate).starts_with(name)) {
      best = candidate;
      break;
    }
    const std::size_t distance = editDistance(name, candidate);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  if (best.empty()) return fmt::format("unknown option {}; see ddprun --help", printable(spelling));
  return fmt::format("unknown option {}; did you mean --{}?", printable(spelling), best);
}

// ------------------------------------------------------------------------------------------------
// Stage 1: argv -> the options ddprun was given, and where the training script starts.

// One option's raw value and where it came from, so that messages can name the source.
struct GivenValue {
  const OptionSpec* spec = nullptr;
  std::string value;   // "" for flags
  std::string origin;  // "--nproc_per_node" or "-r" as typed, or "PET_NPROC_PER_NODE"
  bool fromEnvironment = false;
};

// "--max-restarts 'abc'", the start of most messages.
std::string label(const GivenValue& given) {
  return fmt::format("{} {}", printable(given.origin), quote(given.value));
}

// How to write a corrected value where it came from: "--max-restarts 3" or "PET_MAX_RESTARTS=3".
std::string example(const GivenValue& given, std::string_view value) {
  return fmt::format("{}{}{}", printable(given.origin), given.fromEnvironment ? "=" : " ", value);
}

struct SplitArguments {
  std::map<std::string_view, GivenValue> options;  // by canonical name; the last one given wins
  int scriptIndex = -1;                            // argv index of training_script; -1 = none
};

// argparse takes "-1" and "-0.5" as values, not options, when no option looks like a number.
bool looksLikeOption(std::string_view token) {
  if (token.size() < 2 || token[0] != '-') return false;
  return !parseFiniteNumber(token);
}

SplitArguments splitArguments(int argc, const char* const* argv) {
  SplitArguments split;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i] == nullptr ? "" : argv[i];
    if (arg == "--") {
      if (i + 1 < argc) split.scriptIndex = i + 1;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {  // the training script ("-" included: stdin)
      split.scriptIndex = i;
      break;
    }
    std::string_view spelling;
    std::optional<std::string_view> attached;
    const OptionSpec* spec = nullptr;
    if (arg.starts_with("--")) {
      const auto equals = arg.find('=');
      spelling = arg.substr(0, equals);
      if (equals != std::string_view::npos) attached = arg.substr(equals + 1);
      spec = findLong(spelling.substr(2));
      if (spec == nullptr) throw UsageError(unknownOptionMessage(spelling));
    } else {
      spelling = arg.substr(0, 2);
      spec = findShort(arg[1]);
      if (spec == nullptr) {
        throw UsageError(fmt::format("unknown option {}; see ddprun --help", printable(spelling)));
      }
      if (arg.size() > 2) attached = arg.substr(arg[2] == '=' ? 3 : 2);  // -r3 and -r=3
    }

    GivenValue given{spec, "", std::string(spelling), false};
    if (spec->kind == ValueKind::kFlag) {
      if (attached) {
        throw UsageError(fmt::format("{} takes no value (got {}); give it alone",
                                     printable(spelling), quote(arg)));
      }
    } else if (attached) {
      given.value = *attached;
    } else {
      if (i + 1 >= argc || argv[i + 1] == nullptr) {
        throw UsageError(fmt::format("{} needs a value: {} {}", printable(spelling),
                                     printable(spelling), metavar(*spec)));
      }
      const std::string_view next = argv[i + 1];
      if (looksLikeOption(next)) {
        throw UsageError(fmt::format(
            "{} needs a value but is followed by the option {}; give the value, or write {}=VALUE "
            "for a value that starts with '-'",
            printable(spelling), printable(next), printable(spelling)));
      }
      given.value = next;
      ++i;
    }
    split.options.insert_or_assign(spec->name, std::move(given));
  }
  return split;
}

// ------------------------------------------------------------------------------------------------
// Stage 2: PET_ fallbacks and type conversion.

// Booleans from PET_ accept what torchrun's int() does (any integer: 0 is off, others on) and
// more: Kubeflow writes PET_STANDALONE="" to mean "on", which crashes torchrun.
bool parseEnvironmentBoolean(std::string_view value, const std::string& variable) {
  const std::string word = lowerCase(trim(value));
  if (word.empty() || word == "true" || word == "yes") return true;
  if (word == "false" || word == "no") return false;
  if (const auto number = parseWholeNumber(word.starts_with('+') || word.starts_with('-') ? word.substr(1) : word)) {
    return *number != 0;
  }
  throw UsageError(
      fmt::format("{} {} is not a boolean; use 1/0, true/false, yes/no, or an empty value for true",
                  variable, quote(value)));
}

void addEnvironmentFallbacks(SplitArguments& split, const Environment& environment) {
  for (const auto& spec : kOptions) {
    if (!spec.hasEnvironment || split.options.contains(spec.name)) continue;
    const std::string variable = environmentName(spec);
    const std::string* value = lookup(environment, variable);
    if (value == nullptr) continue;
    if (spec.kind == ValueKind::kFlag) {
      if (!parseEnvironmentBoolean(*value, variable)) continue;
      split.options.emplace(spec.name, GivenValue{&spec, "", variable, true});
    } else {
      split.options.emplace(spec.name, GivenValue{&spec, *value, variable, true});
    }
  }
}

po::options_description programOptions() {
  po::options_description description;
  for (const auto& spec : kOptions) {
    const std::string name(spec.name);
    switch (spec.kind) {
      case ValueKind::kFlag:
        description.add_options()(name.c_str(), po::bool_switch());
        break;
      case ValueKind::kText:
        description.add_options()(name.c_str(), po::value<std::string>());
        break;
      case ValueKind::kInteger:
        description.add_options()(name.c_str(), po::value<int>());
        break;
      case ValueKind::kNumber:
        description.add_options()(name.c_str(), po::value<double>());
        break;
    }
  }
  return description;
}

// The options ddprun was given (command line or PET_), converted to their types.
class Arguments {
 public:
  Arguments(std::map<std::string_view, GivenValue> given,
            const po::options_description& description)
      : given_(std::move(given)) {
    // Tokenising is done (stage 1), so the options go to Program_options as already-parsed
    // name/value pairs: its command-line parser, and with it allow_guessing (prefix matching),
    // never runs, and empty values ("--rdzv-endpoint=", PET_RDZV_CONF="") are kept as such.
    // One store() per option so that a conversion error can name its source.
    for (const auto& [name, entry] : given_) {
      po::parsed_options parsed(&description);
      std::vector<std::string> tokens;
      if (entry.spec->kind == ValueKind::kInteger || entry.spec->kind == ValueKind::kNumber) {
        tokens.emplace_back(trim(entry.value));
      } else if (entry.spec->kind == ValueKind::kText) {
        tokens.push_back(entry.value);
      }
      po::option parsedOption(std::string(name), tokens);
      parsedOption.original_tokens = {entry.origin};
      parsed.options.push_back(std::move(parsedOption));
      try {
        po::store(parsed, values_);
      } catch (const po::error&) {
        throw UsageError(conversionMessage(entry));
      }
    }
    po::notify(values_);
  }

  const GivenValue* given(std::string_view name) const {
    const auto it = given_.find(name);
    return it == given_.end() ? nullptr : &it->second;
  }
  bool flag(std::string_view name) const { return given(name) != nullptr; }
  template <typename T>
  std::optional<T> value(std::string_view name) const {
    const auto it = values_.find(std::string(name));
    if (it == values_.end() || it->second.empty()) return std::nullopt;
    return it->second.as<T>();
  }
  // The value as given, or a stand-in carrying the default, so that messages about defaults
  // read the same as about given values.
  GivenValue givenOr(std::string_view name, std::string_view defaultValue) const {
    if (const auto* entry = given(name)) return *entry;
    return GivenValue{findLong(name), std::string(defaultValue), "--" + std::string(name), false};
  }

 private:
  static std::string conversionMessage(const GivenValue& entry) {
    if (entry.spec->kind == ValueKind::kInteger) {
      return fmt::format("{} is not a whole number; give an integer, e.g. {}", label(entry),
                         example(entry, "1"));
    }
    return fmt::format("{} is not a number; give a number of seconds, e.g. {}", label(entry),
                       example(entry, "30"));
  }

  std::map<std::string_view, GivenValue> given_;
  po::variables_map values_;
};

// ------------------------------------------------------------------------------------------------
// File system, devices, names

bool isDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool pathExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::string absolutePath(const std::string& path) {
  std::error_code error;
  const auto absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.string();
}

int cpuCount() {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0) return static_cast<int>(online);
  return std::max(1u, std::thread::hardware_concurrency());
}

// The NVIDIA kernel driver lists one directory per GPU here; reading it needs neither CUDA nor
// NVML, so ddprun does not link either.
constexpr const char* kNvidiaGpusDir = "/proc/driver/nvidia/gpus";

int physicalNvidiaGpuCount() {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it(kNvidiaGpusDir, error), end; !error && it != end;
       it.increment(error)) {
    ++count;
  }
  return count;
}

int visibleNvidiaGpuCount(const Environment& environment) {
  std::optional<std::string> mask;
  if (const auto* value = lookup(environment, "CUDA_VISIBLE_DEVICES")) mask = *value;
  return detail::visibleGpuCount(physicalNvidiaGpuCount(), mask);
}

// Intel GPUs (torch's "xpu") as DRM render nodes with Intel's PCI vendor id; ZE_AFFINITY_MASK
// narrows them down the way Level Zero does (approximately: one entry per device).
int visibleIntelGpuCount(const Environment& environment) {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it("/sys/class/drm", error), end; !error && it != end;
       it.increment(error)) {
    if (!it->path().filename().string().starts_with("renderD")) continue;
    std::ifstream vendorFile(it->path() / "device" / "vendor");
    std::string vendor;
    if (vendorFile >> vendor && vendor == "0x8086") ++count;
  }
  if (const auto* mask = lookup(environment, "ZE_AFFINITY_MASK");
      mask != nullptr && !mask->empty()) {
    int listed = 0;
    for (const auto entry : split(*mask, ',')) listed += trim(entry).empty() ? 0 : 1;
    count = std::min(count, listed);
  }
  return count;
}

// Numeric addresses are accepted without a lookup; names must resolve now, not minutes later
// when the rendezvous first connects.
void checkResolvable(std::string_view host, const GivenValue& source) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string name(host);
  addrinfo* result = nullptr;
  hints.ai_flags = AI_NUMERICHOST;
  int status = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (status != 0) {
    hints.ai_flags = 0;
    status = ::getaddrinfo(name.c_str(), nullptr, &hints, &result);
  }
  if (result != nullptr) ::freeaddrinfo(result);
  if (status != 0) {
    throw UsageError(
        fmt::format("cannot resolve host {} in {} ({}); check the name or give an IP address",
                    quote(host), printable(source.origin), ::gai_strerror(status)));
  }
}

// ------------------------------------------------------------------------------------------------
// Stage 3: value parsers and validators

std::pair<int, int> parseNnodes(const GivenValue& given) {
  const auto parts = split(given.value, ':');
  const std::string fix =
      fmt::format("use {} or {}", example(given, "N"), example(given, "MIN:MAX"));
  std::vector<long long> counts;
  for (const auto part : parts) {
    const auto count = parseWholeNumber(part);
    if (parts.size() > 2 || !count) {
      throw UsageError(fmt::format("{} is not N or MIN:MAX with whole numbers; {}, e.g. 2 or 1:4",
                                   label(given), fix));
    }
    if (*count < 1 || *count > 1'000'000) {
      throw UsageError(
          fmt::format("{}: a node count must be between 1 and 1000000; {}", label(given), fix));
    }
    counts.push_back(*count);
  }
  const auto minNodes = static_cast<int>(counts.front());
  const auto maxNodes = static_cast<int>(counts.back());
  if (minNodes > maxNodes) {
    throw UsageError(fmt::format("{}: MIN ({}) is larger than MAX ({}); use {} with MIN <= MAX",
                                 label(given), minNodes, maxNodes, example(given, "MIN:MAX")));
  }
  return {minNodes, maxNodes};
}

int resolveNprocPerNode(const GivenValue& given, const Environment& environment) {
  const std::string spec(trim(given.value));
  const std::string instead =
      fmt::format("give a number of workers instead, e.g. {}", example(given, "2"));
  if (spec == "cpu") return cpuCount();
  if (spec == "gpu" || spec == "auto") {
    const int gpus = visibleNvidiaGpuCount(environment);
    if (gpus > 0) return gpus;
    if (spec == "auto") return cpuCount();
    const auto* mask = lookup(environment, "CUDA_VISIBLE_DEVICES");
    throw UsageError(
        fmt::format("{}: no NVIDIA GPU is visible ({}); {}", label(given),
                    mask != nullptr && physicalNvidiaGpuCount() > 0
                        ? fmt::format("CUDA_VISIBLE_DEVICES={} hides them", quote(*mask))
                        : fmt::format("nothing under {}", kNvidiaGpusDir),
                    instead));
  }
  if (spec == "xpu") {
    const int xpus = visibleIntelGpuCount(environment);
    if (xpus > 0) return xpus;
    throw UsageError(fmt::format("{}: no Intel XPU is visible; {}", label(given), instead));
  }
  const auto count = parseWholeNumber(spec);
  if (!count) {
    throw UsageError(fmt::format(
        "{} is not a number of workers; use an integer >= 1 or one of auto, cpu, gpu, xpu",
        label(given)));
  }
  if (*count < 1 || *count > 1'000'000) {
    throw UsageError(
        fmt::format("{}: the number of workers per node must be between 1 and 1000000, e.g. {}",
                    label(given), example(given, "2")));
  }
  return static_cast<int>(*count);
}

struct HostPort {
  std::string host;
  std::optional<std::uint16_t> port;
};

// HOST, HOST:PORT, [IPv6] or [IPv6]:PORT.
HostPort parseEndpoint(const GivenValue& given) {
  const std::string_view text = trim(given.value);
  const std::string fix =
      fmt::format("write HOST:PORT or [IPv6]:PORT, e.g. {}", example(given, "node0:29400"));
  HostPort endpoint;
  std::optional<std::string_view> portText;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      throw UsageError(fmt::format("{}: no ']' after the IPv6 address; {}", label(given), fix));
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        throw UsageError(
            fmt::format("{}: unexpected {} after ']'; {}", label(given), quote(rest), fix));
      }
      portText = rest.substr(1);
    }
  } else {
    const auto colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos) {
      throw UsageError(
          fmt::format("{}: an IPv6 address needs brackets; write [ADDRESS]:PORT, e.g. {}",
                      label(given), example(given, "[::1]:29400")));
    }
    endpoint.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) portText = text.substr(colon + 1);
  }
  if (trim(endpoint.host).empty()) {
    throw UsageError(fmt::format("{}: the host is missing; {}", label(given), fix));
  }
  if (portText) {
    endpoint.port = parsePort(*portText);
    if (!endpoint.port) {
      throw UsageError(fmt::format("{}: port {} is not a number in 0..65535; {}", label(given),
                                   quote(*portText), fix));
    }
  }
  return endpoint;
}

// What each --rdzv-conf key holds; ddprun checks values now instead of at rendezvous time, and
// stores them typed (RendezvousSettings), so nothing downstream parses text.
enum class ConfKind { kSeconds, kOptionalSeconds, kCount, kBoolean, kStoreType, kIgnored, kFile };

using Seconds = std::chrono::milliseconds RendezvousSettings::*;
using FilePath = std::string RendezvousSettings::*;

struct ConfKey {
  std::string_view name;
  ConfKind kind;
  Seconds seconds = nullptr;  // kSeconds: the field it sets
  FilePath file = nullptr;    // kFile: the field it sets
};

// `timeout` (the static backend's join timeout) is handled by resolveRendezvous.
constexpr ConfKey kRdzvConfKeys[] = {
    {"join_timeout", ConfKind::kSeconds, &RendezvousSettings::joinTimeout},
    {"last_call_timeout", ConfKind::kSeconds, &RendezvousSettings::lastCallTimeout},
    {"close_timeout", ConfKind::kSeconds, &RendezvousSettings::closeTimeout},
    {"heartbeat_timeout", ConfKind::kOptionalSeconds},
    {"keep_alive_interval", ConfKind::kSeconds, &RendezvousSettings::keepAliveInterval},
    {"keep_alive_max_attempt", ConfKind::kCount},
    {"timeout", ConfKind::kOptionalSeconds},
    {"read_timeout", ConfKind::kSeconds, &RendezvousSettings::readTimeout},
    {"is_host", ConfKind::kBoolean},
    {"store_type", ConfKind::kStoreType},
    {"use_libuv", ConfKind::kIgnored},  // TCPStore flavour in torch; ddprun's store is its own
    {"exit_barrier_timeout", ConfKind::kSeconds, &RendezvousSettings::exitBarrierTimeout},  // ddprun extra
    // ddprun extras: the job's token and TLS files.
    {"token_file", ConfKind::kFile, nullptr, &RendezvousSettings::tokenFile},
    {"tls_cert", ConfKind::kFile, nullptr, &RendezvousSettings::tlsCert},
    {"tls_key", ConfKind::kFile, nullptr, &RendezvousSettings::tlsKey},
    {"tls_ca", ConfKind::kFile, nullptr, &RendezvousSettings::tlsCa},
};

// torchrun's `timeout` for the static backend when none is given (its LaunchConfig injects it).
constexpr std::chrono::milliseconds kStaticTimeout{900000};

// --rdzv-conf as given: the typed settings, plus what depends on the backend (resolved later).
struct RdzvConf {
  RendezvousSettings settings;
  std::optional<std::chrono::milliseconds> staticTimeout;  // `timeout`
  bool joinTimeoutGiven = false;
};

std::chrono::milliseconds secondsValue(const GivenValue& given, std::string_view key,
                                       std::string_view value) {
  const auto seconds = parseFiniteNumber(value);
  if (!seconds || *seconds <= 0) {
    throw UsageError(fmt::format("{}: {} is not a positive number of seconds; e.g. {}=60",
                                 printable(given.origin), quote(fmt::format("{}={}", key, value)),
                                 key));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(*seconds * 1000));
}

// One key=value into `conf`.
void applyRdzvConfValue(const GivenValue& given, const ConfKey& known, std::string_view value,
                        RdzvConf& conf) {
  const std::string_view key = known.name;
  const std::string entry = fmt::format("{}={}", key, value);
  RendezvousSettings& settings = conf.settings;
  switch (known.kind) {
    case ConfKind::kSeconds:
      settings.*known.seconds = secondsValue(given, key, value);
      conf.joinTimeoutGiven = conf.joinTimeoutGiven || key == "join_timeout";
      return;
    case ConfKind::kOptionalSeconds:
      (key == "timeout" ? conf.staticTimeout : settings.heartbeatTimeout) = secondsValue(given, key, value);
      return;
    case ConfKind::kCount: {
      const auto count = parseWholeNumber(value);
      if (!count || *count < 1) {
        throw UsageError(fmt::format("{}: {} is not a whole number >= 1; e.g. {}=3",
                                     printable(given.origin), quote(entry), key));
      }
      settings.keepAliveMaxAttempts = static_cast<int>(std::min<long long>(*count, 1000000));
      return;
    }
    case ConfKind::kBoolean: {
      const std::string word = lowerCase(value);
      if (word == "1" || word == "true" || word == "t" || word == "yes" || word == "y") {
        settings.isHost = true;
        return;
      }
      if (word == "0" || word == "false" || word == "f" || word == "no" || word == "n") {
        settings.isHost = false;
        return;
      }
      throw UsageError(fmt::format("{}: {} is not a boolean; use {}=true or {}=false",
                                   printable(given.origin), quote(entry), key, key));
    }
    case ConfKind::kStoreType: {
      const std::string type = lowerCase(value);
      if (type == "tcp") return;
      if (type == "file") {
        throw UsageError(fmt::format(
            "{}: store_type=file (a FileStore on a shared file system) is not supported by ddprun; "
            "drop it or use store_type=tcp",
            printable(given.origin)));
      }
      throw UsageError(fmt::format("{}: unknown store_type {}; ddprun supports store_type=tcp",
                                   printable(given.origin), quote(value)));
    }
    case ConfKind::kIgnored:
      return;
    case ConfKind::kFile:
      // Read (and a secret's mode checked) by the agent when it starts: one place reads them.
      settings.*known.file = std::string(value);
      return;
  }
}

// k=v,k2=v2 with keys and values stripped. Unknown keys are warned about and dropped (torchrun
// drops them silently, so a typo such as join_timout=5 goes unnoticed). Unlike torchrun, an
// empty entry (a trailing comma) is tolerated.
RdzvConf parseRdzvConf(const GivenValue& given, std::vector<std::string>& warnings) {
  RdzvConf conf;
  if (trim(given.value).empty()) return conf;
  for (const auto item : split(given.value, ',')) {
    if (trim(item).empty()) continue;
    const auto equals = item.find('=');
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : trim(item.substr(equals + 1));
    if (key.empty()) {
      throw UsageError(fmt::format("{}: entry {} has no key; write key=value,key=value, e.g. {}",
                                   printable(given.origin), quote(item),
                                   example(given, "join_timeout=600")));
    }
    if (value.empty()) {
      throw UsageError(fmt::format("{}: key {} has no value; write {}=VALUE",
                                   printable(given.origin), quote(key), printable(key)));
    }
    const auto known = std::find_if(std::begin(kRdzvConfKeys), std::end(kRdzvConfKeys),
                                    [&](const ConfKey& k) { return k.name == key; });
    if (known == std::end(kRdzvConfKeys)) {
      std::string names;
      for (const auto& k : kRdzvConfKeys) {
        names += (names.empty() ? "" : ", ") + std::string(k.name);
      }
      warnings.push_back(fmt::format("{}: unknown key {} ignored (ddprun knows {})",
                                     printable(given.origin), quote(key), names));
      continue;
    }
    applyRdzvConfValue(given, *known, value, conf);
  }
  const RendezvousSettings& s = conf.settings;
  if (!s.tlsCert.empty() || !s.tlsKey.empty() || !s.tlsCa.empty()) {
    // TLS hides the bytes; the token is what keeps strangers out, and the relay needs it.
    if (s.tokenFile.empty()) {
      throw UsageError(fmt::format("{}: TLS needs the job's token too; add token_file=PATH",
                                   printable(given.origin)));
    }
    // Any agent may host the workers' store (group rank 0 of a round), so each needs both.
    if (s.tlsCert.empty() || s.tlsKey.empty()) {
      throw UsageError(fmt::format("{}: give every agent both tls_cert=PATH and tls_key=PATH (any "
                                   "agent may host the workers' store)",
                                   printable(given.origin)));
    }
  }
  return conf;
}

StdStreams streamsFromDigit(char digit) {
  const int bits = digit - '0';
  return StdStreams{(bits & 1) != 0, (bits & 2) != 0};
}

bool isStreamDigit(std::string_view text) {
  return text.size() == 1 && text[0] >= '0' && text[0] <= '3';
}

// -r/-t: "0".."3" for every local rank, or LOCAL_RANK:N,... (multi-digit ranks allowed).
StreamSelection parseStreamSelection(const GivenValue& given) {
  const std::string_view text = trim(given.value);
  StreamSelection selection;
  if (isStreamDigit(text)) {
    selection.all = streamsFromDigit(text[0]);
    return selection;
  }
  const auto invalid = [&] {
    return UsageError(fmt::format(
        "{} is not 0-3 or a per-rank map; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), or "
        "LOCAL_RANK:N pairs, e.g. {}",
        label(given), example(given, "0:3,1:1")));
  };
  if (text.find(':') == std::string_view::npos) throw invalid();
  selection.perRankGiven = true;
  for (const auto item : split(text, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) throw invalid();
    const auto rank = parseWholeNumber(item.substr(0, colon));
    const std::string_view digit = trim(item.substr(colon + 1));
    if (!rank || *rank < 0 || *rank > 1'000'000 || !isStreamDigit(digit)) throw invalid();
    const auto [it, inserted] =
        selection.perRank.emplace(static_cast<int>(*rank), streamsFromDigit(digit[0]));
    if (!inserted) {
      throw UsageError(fmt::format("{}: local rank {} is listed twice; list each rank once",
                                   label(given), *rank));
    }
  }
  return selection;
}

std::optional<std::set<int>> parseLocalRanksFilter(const GivenValue& given) {
  if (trim(given.value).empty()) return std::nullopt;
  std::set<int> ranks;
  for (const auto item : split(given.value, ',')) {
    const auto rank = parseWholeNumber(item);
    if (!rank || *rank < 0 || *rank > 1'000'000) {
      throw UsageError(
          fmt::format("{}: {} is not a local rank; use comma-separated ranks >= 0, e.g. {}",
                      label(given), quote(trim(item)), example(given, "0,2")));
    }
    ranks.insert(static_cast<int>(*rank));
  }
  return ranks;
}

// Comma list where ",," stands for a literal comma; empty entries are dropped.
std::vector<std::string> parseDuplicateFilters(std::string_view text) {
  std::vector<std::string> filters;
  std::string current;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      current += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      current += ',';
      ++i;
    } else {
      if (!current.empty()) filters.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) filters.push_back(std::move(current));
  return filters;
}

struct SignalName {
  std::string_view name;  // without "SIG"
  int number;
};

constexpr SignalName kSignals[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},
    {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CHLD", SIGCHLD},
    {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},
    {"PWR", SIGPWR},       {"SYS", SIGSYS},
};

// "SIGTERM,SIGUSR1", "TERM,usr1": names with or without SIG, any case; stored as numbers.
std::vector<int> parseSignals(const GivenValue& given) {
  std::vector<int> numbers;
  for (const auto item : split(given.value, ',')) {
    std::string name = upperCase(trim(item));
    if (name.starts_with("SIG")) name.erase(0, 3);
    const auto known = std::find_if(std::begin(kSignals), std::end(kSignals),
                                    [&](const SignalName& s) { return s.name == name; });
    if (known == std::end(kSignals)) {
      throw UsageError(fmt::format("{}: unknown signal {}; use signal names such as {}",
                                   label(given), quote(trim(item)),
                                   example(given, "SIGTERM,SIGINT,SIGUSR1")));
    }
    if (known->number == SIGKILL || known->number == SIGSTOP) {
      throw UsageError(fmt::format("{}: SIG{} cannot be caught; drop it", label(given), name));
    }
    if (std::find(numbers.begin(), numbers.end(), known->number) == numbers.end()) {
      numbers.push_back(known->number);
    }
  }
  return numbers;
}

void checkChoice(const GivenValue& given, std::initializer_list<std::string_view> choices) {
  if (std::find(choices.begin(), choices.end(), given.value) != choices.end()) return;
  std::string list;
  for (const auto choice : choices) list += (list.empty() ? "" : ", ") + std::string(choice);
  throw UsageError(fmt::format("{} is not one of {}; e.g. {}", label(given), list,
                               example(given, *choices.begin())));
}

std::chrono::milliseconds secondsToMilliseconds(double seconds) {
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

// Up to ~31 years: anything larger is a typo, and would overflow later arithmetic.
constexpr double kMaxSeconds = 1e9;

std::chrono::milliseconds resolveShutdownTimeout(const Arguments& arguments,
                                                 const Environment& environment) {
  if (const auto* given = arguments.given("shutdown-timeout")) {
    const double seconds = *arguments.value<double>("shutdown-timeout");
    if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxSeconds) {
      throw UsageError(
          fmt::format("{}: the shutdown timeout must be a number of seconds >= 0, e.g. {}",
                      label(*given), example(*given, "30")));
    }
    return secondsToMilliseconds(seconds);
  }
  if (const auto* value = lookup(environment, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    const auto seconds = parseFiniteNumber(*value);
    if (!seconds || *seconds < 0 || *seconds > kMaxSeconds) {
      throw UsageError(fmt::format(
          "TORCH_ELASTIC_SHUTDOWN_TIMEOUT {} is not a number of seconds >= 0; set it to e.g. 30 "
          "or unset it",
          quote(*value)));
    }
    return secondsToMilliseconds(*seconds);
  }
  return std::chrono::seconds(30);
}

// The directory need not exist (the agent creates it), but must be creatable.
void checkLogDir(const GivenValue& given) {
  if (given.value.empty()) return;
  const std::string& path = given.value;
  if (pathExists(path)) {
    if (!isDirectory(path)) {
      throw UsageError(
          fmt::format("{} exists but is not a directory; give a directory (it is "
                      "created if missing)",
                      label(given)));
    }
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
      throw UsageError(fmt::format(
          "{} is not writable; fix its permissions or choose another directory", label(given)));
    }
    return;
  }
  std::filesystem::path ancestor = std::filesystem::absolute(path).parent_path();
  while (!pathExists(ancestor.string()) && ancestor.has_relative_path()) {
    ancestor = ancestor.parent_path();
  }
  // Only trying tells whether a directory can be made there (root passes access() even in
  // /proc): make one and remove it, so that parsing leaves nothing behind.
  std::string probe = (ancestor / ".ddprun-log-dir-XXXXXX").string();
  if (!isDirectory(ancestor.string()) || ::mkdtemp(probe.data()) == nullptr) {
    throw UsageError(
        fmt::format("{} cannot be created: {} is not a writable directory; choose "
                    "another --log-dir",
                    label(given), quote(ancestor.string())));
  }
  ::rmdir(probe.c_str());
}

// ------------------------------------------------------------------------------------------------
// What runs

std::string resolvePython(const Environment& environment) {
  const std::string* pythonExec = lookup(environment, "PYTHON_EXEC");
  if (pythonExec != nullptr && !pythonExec->empty()) {  // an empty PYTHON_EXEC counts as unset
    if (pythonExec->find('/') != std::string::npos) {
      if (!common::isExecutableFile(*pythonExec)) {
        throw UsageError(
            fmt::format("PYTHON_EXEC {} is not an executable file; point it at a "
                        "Python interpreter or unset it",
                        quote(*pythonExec)));
      }
      return *pythonExec;
    }
    if (const auto found = common::findExecutable(*pythonExec, environment)) return absolutePath(*found);
    throw UsageError(
        fmt::format("PYTHON_EXEC {} is not found on PATH; give the interpreter's full "
                    "path or unset it",
                    quote(*pythonExec)));
  }
  // Not canonicalised: a virtualenv's python is a symlink that must keep its own path.
  if (const auto found = common::findExecutable("python3", environment)) return absolutePath(*found);
  throw UsageError(
      "no python3 on PATH and PYTHON_EXEC is not set; install Python 3, set "
      "PYTHON_EXEC=/path/to/python, or run an executable with --no-python");
}

std::string missingScriptMessage(const std::string& script) {
  std::error_code error;
  const auto cwd = std::filesystem::current_path(error);
  const bool mayBeCommand = script.find('/') == std::string::npos && !script.ends_with(".py");
  return fmt::format("training script {} does not exist (relative to {}){}; check the path",
                     quote(script), quote(error ? std::string("?") : cwd.string()),
                     mayBeCommand ? " and is not a command on PATH" : "");
}

// --no-python: exec'd as given; a bare name is looked up on PATH only, as execvp does.
std::string resolveExplicitExecutable(const std::string& script, const GivenValue& noPython,
                                      const Environment& environment) {
  if (script.find('/') == std::string::npos) {
    if (const auto found = common::findExecutable(script, environment)) return *found;
    if (common::isExecutableFile(script)) {
      throw UsageError(
          fmt::format("{}: {} is not on PATH; to run the file in the working directory write ./{}",
                      printable(noPython.origin), quote(script), printable(script)));
    }
    if (pathExists(script)) {
      throw UsageError(
          fmt::format("{}: {} is not on PATH, and the file of that name here is not "
                      "executable; chmod +x it and write ./{}, or drop {}",
                      printable(noPython.origin), quote(script), printable(script),
                      printable(noPython.origin)));
    }
    throw UsageError(fmt::format("{}: {} is not found on PATH; give its path, e.g. ./{}",
                                 printable(noPython.origin), quote(script), printable(script)));
  }
  if (!pathExists(script)) throw UsageError(missingScriptMessage(script));
  if (isDirectory(script)) {
    throw UsageError(
        fmt::format("{}: {} is a directory, not an executable; give the program's path",
                    printable(noPython.origin), quote(script)));
  }
  if (!common::isExecutableFile(script)) {
    throw UsageError(fmt::format("{}: {} is not executable; chmod +x it or drop {}",
                                 printable(noPython.origin), quote(script),
                                 printable(noPython.origin)));
  }
  return script;
}

// What a file that is not executable is meant for, from its first bytes: a program or a script
// of another language ("a program", "a /bin/sh script"), or nothing when it may be Python.
std::optional<std::string> notPythonKind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.starts_with("\x7f" "ELF")) return "a program";
  if (head.starts_with("#!")) {
    const std::string interpreter = head.substr(2, head.find('\n') - 2);
    if (interpreter.find("python") == std::string::npos) {
      return fmt::format("a script for {}", std::string(trim(interpreter)));
    }
  }
  return std::nullopt;
}

// No flag: a .py file runs under Python; any other executable file (an ELF binary, a shebang
// script) runs directly, so existing training binaries work without --no-python; a
// non-executable file runs under Python, as torchrun would, unless it plainly is not Python.
void detectEntry(LaunchConfig& config, const Environment& environment) {
  const std::string& script = config.entry.script;
  const bool bareName = script.find('/') == std::string::npos;
  config.entry.kind = EntryKind::kPythonScript;
  if (pathExists(script)) {
    if (isDirectory(script)) {
      if (!pathExists(script + "/__main__.py")) {
        throw UsageError(
            fmt::format("training script {} is a directory without __main__.py; give "
                        "the script inside it",
                        quote(script)));
      }
      return;
    }
    if (!script.ends_with(".py") && common::isExecutableFile(script)) {
      config.entry.kind = EntryKind::kExecutable;
      config.entry.executable = bareName ? "./" + script : script;
    } else if (const auto kind = script.ends_with(".py") ? std::nullopt : notPythonKind(script)) {
      throw UsageError(fmt::format("training script {} is {} but not executable; chmod +x it",
                                   quote(script), *kind));
    }
    return;
  }
  if (bareName && !script.ends_with(".py")) {
    if (const auto found = common::findExecutable(script, environment)) {
      config.entry.kind = EntryKind::kExecutable;
      config.entry.executable = *found;
      return;
    }
  }
  throw UsageError(missingScriptMessage(script));
}

void resolveEntry(const Arguments& arguments, int argc, const char* const* argv, int scriptIndex,
                  const Environment& environment, CommandLine& result) {
  LaunchConfig& config = result.config;
  if (scriptIndex < 0 || scriptIndex >= argc || argv[scriptIndex] == nullptr) {
    throw UsageError("missing the training script: ddprun [options] script.py [args]");
  }
  config.entry.script = argv[scriptIndex];
  int first = scriptIndex + 1;
  // torchrun's argparse drops a "--" right after the script (`train.py -- --lr 0.1` gives the
  // script ['--lr', '0.1']), unless a "--" before the script already ended the options; a later
  // "--" is the script's own.
  const bool endedBefore = scriptIndex > 1 && argv[scriptIndex - 1] != nullptr &&
                           std::string_view(argv[scriptIndex - 1]) == "--";
  if (!endedBefore && first < argc && argv[first] != nullptr && std::string_view(argv[first]) == "--") ++first;
  for (int i = first; i < argc; ++i) {
    config.entry.args.emplace_back(argv[i] == nullptr ? "" : argv[i]);
  }
  if (config.entry.script.empty()) {
    throw UsageError("the training script is an empty string: ddprun [options] script.py [args]");
  }

  const GivenValue* module = arguments.given("module");
  const GivenValue* noPython = arguments.given("no-python");
  const GivenValue* runPath = arguments.given("run-path");
  if (runPath != nullptr) {
    // torchrun lets --run-path win over both; say so instead of silently ignoring them.
    for (const auto* ignored : {module, noPython}) {
      if (ignored != nullptr) {
        result.warnings.push_back(fmt::format("{} is ignored with {}", printable(ignored->origin),
                                              printable(runPath->origin)));
      }
    }
    if (!pathExists(config.entry.script)) {
      throw UsageError(missingScriptMessage(config.entry.script));
    }
    config.entry.kind = EntryKind::kRunPath;
  } else if (module != nullptr && noPython != nullptr) {
    throw UsageError(
        fmt::format("{} and {} cannot be used together: a module needs Python; drop one of them",
                    printable(module->origin), printable(noPython->origin)));
  } else if (module != nullptr) {
    config.entry.kind = EntryKind::kPythonModule;
  } else if (noPython != nullptr) {
    config.entry.kind = EntryKind::kExecutable;
    config.entry.executable = resolveExplicitExecutable(config.entry.script, *noPython, environment);
  } else {
    detectEntry(config, environment);
  }
  if (config.entry.kind != EntryKind::kExecutable) config.entry.python = resolvePython(environment);
}

// ------------------------------------------------------------------------------------------------
// Rendezvous

void resolveRendezvous(const Arguments& arguments, CommandLine& result) {
  LaunchConfig& config = result.config;
  auto& warnings = result.warnings;

  RdzvConf conf;
  if (const auto* given = arguments.given("rdzv-conf")) conf = parseRdzvConf(*given, warnings);
  config.rdzv.settings = conf.settings;

  if (const auto* standalone = arguments.given("standalone")) {
    if (config.rdzv.maxNodes != 1) {
      throw UsageError(fmt::format(
          "{} is single-node but --nnodes allows {} nodes; drop --nnodes or use --rdzv-backend "
          "c10d with --rdzv-endpoint for a multi-node job",
          printable(standalone->origin), config.rdzv.maxNodes));
    }
    for (const auto name : {"rdzv-backend", "rdzv-endpoint", "rdzv-id"}) {
      if (const auto* ignored = arguments.given(name)) {
        warnings.push_back(
            fmt::format("{} ignores {} (it always uses c10d on 127.0.0.1 with a "
                        "free port and a random run id)",
                        printable(standalone->origin), label(*ignored)));
      }
    }
    config.rdzv.standalone = true;
    config.rdzv.backend = RdzvBackend::kC10d;
    config.rdzv.endpoint = "127.0.0.1:0";
    config.rdzv.host = "127.0.0.1";
    config.rdzv.port = 0;
    config.rdzv.runId = common::randomHexId();
    return;
  }

  if (const auto* id = arguments.given("rdzv-id")) config.rdzv.runId = id->value;

  const GivenValue backend = arguments.givenOr("rdzv-backend", "static");
  const std::string backendName(trim(backend.value));
  if (backendName == "static") {
    config.rdzv.backend = RdzvBackend::kStatic;
    // torchrun's static rendezvous waits `timeout` (its TCPStore timeout, 900 s unless given)
    // for the nodes and the master's store to come.
    if (!conf.joinTimeoutGiven) config.rdzv.settings.joinTimeout = conf.staticTimeout.value_or(kStaticTimeout);
  } else if (backendName == "c10d") {
    config.rdzv.backend = RdzvBackend::kC10d;
  } else if (backendName == "etcd" || backendName == "etcd-v2") {
    throw UsageError(fmt::format(
        "{}: etcd rendezvous is not supported by ddprun; use --rdzv-backend c10d", label(backend)));
  } else {
    throw UsageError(fmt::format("{} is not a rendezvous backend; use static or c10d, e.g. {}",
                                 label(backend), example(backend, "c10d")));
  }

  const GivenValue* endpoint = arguments.given("rdzv-endpoint");
  const bool hasEndpoint = endpoint != nullptr && !trim(endpoint->value).empty();
  if (hasEndpoint) config.rdzv.endpoint = std::string(trim(endpoint->value));

  if (config.rdzv.backend == RdzvBackend::kC10d) {
    for (const auto name : {"master-addr", "master-port"}) {
      if (const auto* ignored = arguments.given(name); ignored != nullptr && !hasEndpoint) {
        warnings.push_back(
            fmt::format("{} is only used by the static backend; with c10d give the "
                        "store's address as --rdzv-endpoint HOST:PORT",
                        label(*ignored)));
      }
    }
    if (hasEndpoint) {
      const HostPort parsed = parseEndpoint(*endpoint);
      checkResolvable(parsed.host, *endpoint);
      config.rdzv.host = parsed.host;
      config.rdzv.port = parsed.port.value_or(kDefaultC10dPort);
    } else {
      config.rdzv.host = "localhost";
      config.rdzv.port = kDefaultC10dPort;
      if (config.rdzv.maxNodes > 1) {
        warnings.push_back(fmt::format(
            "--rdzv-backend c10d without --rdzv-endpoint uses localhost:{}, which only works when "
            "every node runs on this host; give --rdzv-endpoint HOST:PORT",
            kDefaultC10dPort));
      }
    }
    return;
  }

  // Static: node rank r of exactly MAX nodes; the store is at the endpoint if one is given,
  // else at --master-addr:--master-port.
  if (config.rdzv.minNodes != config.rdzv.maxNodes) {
    warnings.push_back(fmt::format(
        "--nnodes {}:{} with the static backend waits for exactly {} nodes; use --rdzv-backend "
        "c10d for an elastic range",
        config.rdzv.minNodes, config.rdzv.maxNodes, config.rdzv.maxNodes));
  }
  if (config.rdzv.nodeRank >= config.rdzv.maxNodes) {
    const GivenValue rank = arguments.givenOr("node-rank", "0");
    throw UsageError(fmt::format(
        "{} is outside 0..{} for {} node{}; give a rank below the node count", label(rank),
        config.rdzv.maxNodes - 1, config.rdzv.maxNodes, config.rdzv.maxNodes == 1 ? "" : "s"));
  }
  const std::uint16_t port = config.rdzv.masterPort.value_or(kDefaultMasterPort);
  if (port == 0 && config.rdzv.maxNodes > 1) {
    throw UsageError(fmt::format(
        "{} picks a free port, which the other {} nodes cannot know; give every node the same "
        "port, e.g. --master-port 29500",
        label(arguments.givenOr("master-port", "0")), config.rdzv.maxNodes - 1));
  }
  if (hasEndpoint) {
    const HostPort parsed = parseEndpoint(*endpoint);
    checkResolvable(parsed.host, *endpoint);
    config.rdzv.host = parsed.host;
    config.rdzv.port = parsed.port.value_or(port);
  } else {
    const GivenValue master = arguments.givenOr("master-addr", config.rdzv.masterAddr);
    std::string host(trim(master.value));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    checkResolvable(host, master);
    config.rdzv.host = host;
    config.rdzv.port = port;
  }
}

// ------------------------------------------------------------------------------------------------
// Help

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

std::string helpText() {
  std::string out = fmt::format(
      "usage: ddprun [options] training_script [training_script_args ...]\n\n"
      "ddprun {}: a native drop-in replacement for torchrun (Torch Distributed Elastic Training "
      "Launcher).\nEach option not given falls back to its PET_ environment variable "
      "(e.g. PET_NPROC_PER_NODE).\nOptions end at training_script (or at --); what follows it "
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

// ------------------------------------------------------------------------------------------------

void checkNumber(const Arguments& arguments, std::string_view name, const char* rule,
                 std::string_view good, bool ok) {
  if (ok) return;
  const auto* given = arguments.given(name);
  throw UsageError(fmt::format("{}: {}; e.g. {}", label(*given), rule, example(*given, good)));
}

// A number of seconds where 0 means "no limit" (nothing); `current` when not given.
std::optional<std::chrono::milliseconds> optionalSeconds(const Arguments& arguments, std::string_view name,
                                                         std::optional<std::chrono::milliseconds> current) {
  const auto seconds = arguments.value<double>(name);
  if (!seconds) return current;
  checkNumber(arguments, name, "must be a number of seconds >= 0 (0: no limit)", "60",
              std::isfinite(*seconds) && *seconds >= 0 && *seconds <= kMaxSeconds);
  if (*seconds == 0) return std::nullopt;
  return std::max(secondsToMilliseconds(*seconds), std::chrono::milliseconds(1));
}

CommandLine buildConfig(const Arguments& arguments, int argc, const char* const* argv,
                        int scriptIndex, const Environment& environment) {
  CommandLine result;
  LaunchConfig& config = result.config;

  if (const auto* nnodes = arguments.given("nnodes")) {
    std::tie(config.rdzv.minNodes, config.rdzv.maxNodes) = parseNnodes(*nnodes);
  }
  if (const auto* nproc = arguments.given("nproc-per-node")) {
    config.nprocPerNodeSpec = nproc->value;
    config.nprocPerNode = resolveNprocPerNode(*nproc, environment);
  }

  if (const auto restarts = arguments.value<int>("max-restarts")) {
    checkNumber(arguments, "max-restarts", "restarts cannot be negative", "3", *restarts >= 0);
    config.restart.maxRestarts = *restarts;
  }
  if (const auto interval = arguments.value<double>("monitor-interval")) {
    checkNumber(arguments, "monitor-interval", "must be a positive number of seconds", "0.1",
                std::isfinite(*interval) && *interval > 0 && *interval <= kMaxSeconds);
    config.restart.monitorInterval = *interval;
  }
  config.restart.shutdownTimeout = resolveShutdownTimeout(arguments, environment);
  config.hang.hangTimeout = optionalSeconds(arguments, "hang-timeout", config.hang.hangTimeout);
  config.hang.startupTimeout =
      optionalSeconds(arguments, "hang-startup-timeout", config.hang.startupTimeout);
  config.hang.exitTimeout = optionalSeconds(arguments, "exit-timeout", config.hang.exitTimeout);
  if (const auto* signals = arguments.given("signals-to-handle")) {
    config.restart.signalsToHandle = parseSignals(*signals);
  }

  if (const auto rank = arguments.value<int>("node-rank")) {
    checkNumber(arguments, "node-rank", "a node rank cannot be negative", "0", *rank >= 0);
    config.rdzv.nodeRank = *rank;
  }
  if (const auto port = arguments.value<int>("master-port")) {
    checkNumber(arguments, "master-port", "a port must be in 0..65535", "29500",
                *port >= 0 && *port <= 65535);
    config.rdzv.masterPort = static_cast<std::uint16_t>(*port);
  }
  if (const auto* addr = arguments.given("master-addr")) {
    if (trim(addr->value).empty()) {
      throw UsageError(fmt::format("{} is empty; give the rank-0 node's address, e.g. {}",
                                   label(*addr), example(*addr, "node0")));
    }
    config.rdzv.masterAddr = std::string(trim(addr->value));
  }
  if (const auto* addr = arguments.given("local-addr")) {
    config.rdzv.localAddr = std::string(trim(addr->value));
  }

  if (const auto* method = arguments.given("start-method")) {
    checkChoice(*method, {"spawn", "fork", "forkserver"});
    config.entry.startMethod = method->value;
    if (method->value != "spawn") {
      result.warnings.push_back(fmt::format(
          "{}: ddprun starts every worker as a fresh process (as spawn does); {} changes nothing",
          label(*method), method->value));
    }
  }
  if (const auto* handler = arguments.given("event-log-handler")) {
    checkChoice(*handler, {"null", "console", "dynamic_rendezvous"});
    config.eventLogHandler = handler->value;
  }
  if (const auto* role = arguments.given("role")) config.role = role->value;

  if (const auto* redirects = arguments.given("redirects")) {
    config.logs.redirects = parseStreamSelection(*redirects);
  }
  if (const auto* tee = arguments.given("tee")) config.logs.tee = parseStreamSelection(*tee);
  if (const auto* filter = arguments.given("local-ranks-filter")) {
    config.logs.localRanksFilter = parseLocalRanksFilter(*filter);
    if (config.logs.localRanksFilter && *config.logs.localRanksFilter->rbegin() >= config.nprocPerNode) {
      result.warnings.push_back(
          fmt::format("{}: local rank {} does not exist with {} workers per node", label(*filter),
                      *config.logs.localRanksFilter->rbegin(), config.nprocPerNode));
    }
  }
  if (const auto* filters = arguments.given("duplicate-stdout-filters")) {
    config.logs.duplicateStdoutFilters = parseDuplicateFilters(filters->value);
  }
  if (const auto* filters = arguments.given("duplicate-stderr-filters")) {
    config.logs.duplicateStderrFilters = parseDuplicateFilters(filters->value);
  }
  if (const auto* specs = arguments.given("logs-specs")) {
    throw UsageError(
        fmt::format("{} names a Python LogsSpecs plugin and ddprun has no Python "
                    "plugin host; drop it and use --log-dir, --redirects and --tee",
                    label(*specs)));
  }
  if (const auto* numa = arguments.given("numa-binding")) {
    checkChoice(*numa, {"node", "socket", "exclusive", "core-complex"});
    if (!common::findExecutable("numactl", environment)) {
      throw UsageError(
          fmt::format("{} needs numactl on PATH; install it (apt-get install numactl) or drop {}",
                      label(*numa), printable(numa->origin)));
    }
    config.numaBinding = numa->value;
  }
  config.virtualLocalRank = arguments.flag("virtual-local-rank");

  // The checks below look at the file system and resolve names: after the pure ones, so that
  // a typo is reported before anything slower.
  resolveEntry(arguments, argc, argv, scriptIndex, environment, result);
  if (const auto* logDir = arguments.given("log-dir")) {
    checkLogDir(*logDir);
    config.logs.dir = logDir->value;
  }
  resolveRendezvous(arguments, result);
  return result;
}

}  // namespace

CommandLine parseCommandLine(int argc, const char* const* argv,
                             const std::map<std::string, std::string>& environment) {
  SplitArguments split = splitArguments(argc, argv);
  if (split.options.contains("help")) {
    CommandLine result;
    result.helpRequested = true;
    result.helpText = helpText();
    return result;
  }
  if (split.options.contains("version")) {
    CommandLine result;
    result.versionRequested = true;
    return result;
  }
  addEnvironmentFallbacks(split, environment);
  const po::options_description description = programOptions();
  const Arguments arguments(std::move(split.options), description);
  return buildConfig(arguments, argc, argv, split.scriptIndex, environment);
}

std::string versionText() { return fmt::format("ddprun {}", DDPRUN_VERSION); }

namespace detail {

int visibleGpuCount(int physicalGpus, const std::optional<std::string>& cudaVisibleDevices) {
  if (!cudaVisibleDevices) return physicalGpus;
  std::set<long long> seen;
  int count = 0;
  for (const auto entry : split(*cudaVisibleDevices, ',')) {
    const std::string_view device = trim(entry);
    if (device.starts_with("GPU-") || device.starts_with("MIG-")) {
      ++count;  // a UUID: cannot be checked without NVML; assume it names a present device
      continue;
    }
    const auto index = parseWholeNumber(device);
    if (!index || *index < 0 || *index >= physicalGpus || !seen.insert(*index).second) break;
    ++count;
  }
  return std::min(count, physicalGpus);
}

}  // namespace detail

}  // namespace ddprun::launcher
