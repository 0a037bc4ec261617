#include "cli/value_parsers.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <iterator>

#include "cli/cli.h"
#include "cli/host_probes.h"
#include "core/cuda_visible_devices.h"
#include "ddprun/common/run_id.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

StdStreams streamsFromDigit(char digit) {
  const int bits = digit - '0';
  return StdStreams{(bits & 1) != 0, (bits & 2) != 0};
}

bool isStreamDigit(std::string_view text) {
  return text.size() == 1 && text[0] >= '0' && text[0] <= '3';
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

}  // namespace

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
    const auto* mask = lookup(environment, kCudaVisibleDevices);
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
  // The most a node record may claim (the other nodes refuse a larger one): said here, at start.
  if (*count < 1 || *count > kMaxNprocPerNode) {
    throw UsageError(
        fmt::format("{}: the number of workers per node must be between 1 and {}, e.g. {}",
                    label(given), kMaxNprocPerNode, example(given, "2")));
  }
  return static_cast<int>(*count);
}

std::string parseRunId(const GivenValue& given) {
  if (common::isRunId(given.value)) return given.value;
  // A long id is shown cut: enough to recognise it (and bounded, escaped: it is outside text).
  const std::string shown =
      given.value.size() > common::kShownBytes
          ? fmt::format("'{}...' ({} bytes)", common::printablePrefix(given.value),
                        given.value.size())
          : fmt::format("'{}'", printable(given.value));
  throw UsageError(fmt::format("{} {}: {}; e.g. {}", printable(given.origin), shown,
                               common::kRunIdRule, example(given, "job1")));
}

// HOST, HOST:PORT, [IPv6] or [IPv6]:PORT.
HostPort parseEndpoint(const GivenValue& given) {
  const std::string_view text = trim(given.value);
  const std::string fix =
      fmt::format("write HOST:PORT or [IPv6]:PORT, e.g. {}", example(given, "node0:29400"));
  if (text.find('@') != std::string_view::npos) {
    // label() shows the value with the user information as "***".
    throw UsageError(
        fmt::format("{}: a user name or password does not go in the address (the "
                    "job's secret is a file given as token_file=PATH in --rdzv-conf); {}",
                    label(given), fix));
  }
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

void checkChoice(const GivenValue& given) {
  const std::span<const std::string_view> choices = given.spec->choices;
  if (std::find(choices.begin(), choices.end(), given.value) != choices.end()) return;
  std::string list;
  for (const auto choice : choices) list += (list.empty() ? "" : ", ") + std::string(choice);
  throw UsageError(fmt::format("{} is not one of {}; e.g. {}", label(given), list,
                               example(given, *choices.begin())));
}

}  // namespace ddprun::launcher::cli_detail
