#include "cli/given_values.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "cli/cli.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// argparse takes "-1" and "-0.5" as values, not options, when no option looks like a number.
bool looksLikeOption(std::string_view token) {
  if (token.size() < 2 || token[0] != '-') return false;
  return !parseFiniteNumber(token);
}

// One option argument, as typed: which option, the spelling to name it by, and a value
// attached with '=' (or after a short option's letter: -r3).
struct TypedOption {
  const OptionSpec* spec = nullptr;
  std::string_view spelling;
  std::optional<std::string_view> attached;
};

TypedOption readOption(std::string_view arg) {
  TypedOption typed;
  if (arg.starts_with("--")) {
    const auto equals = arg.find('=');
    typed.spelling = arg.substr(0, equals);
    if (equals != std::string_view::npos) typed.attached = arg.substr(equals + 1);
    typed.spec = &longOption(typed.spelling);
    return typed;
  }
  typed.spelling = arg.substr(0, 2);
  typed.spec = shortOption(arg[1]);
  if (typed.spec == nullptr) {
    throw UsageError(
        fmt::format("unknown option {}; see ddprun --help", printable(typed.spelling)));
  }
  if (arg.size() > 2) typed.attached = arg.substr(arg[2] == '=' ? 3 : 2);  // -r3 and -r=3
  return typed;
}

// The option at argv[i] with its value; advances i past a value given as the next argument.
GivenValue takeOption(int argc, const char* const* argv, int& i) {
  const std::string_view arg = argv[i];
  const TypedOption typed = readOption(arg);
  GivenValue given{typed.spec, "", std::string(typed.spelling), false};
  if (typed.spec->kind == ValueKind::kFlag) {
    if (typed.attached) {
      throw UsageError(fmt::format("{} takes no value (got {}); give it alone",
                                   printable(typed.spelling), quote(arg)));
    }
    return given;
  }
  if (typed.attached) {
    given.value = *typed.attached;
    return given;
  }
  if (i + 1 >= argc || argv[i + 1] == nullptr) {
    throw UsageError(fmt::format("{} needs a value: {} {}", printable(typed.spelling),
                                 printable(typed.spelling), metavar(*typed.spec)));
  }
  const std::string_view next = argv[i + 1];
  if (looksLikeOption(next)) {
    throw UsageError(fmt::format(
        "{} needs a value but is followed by the option {}; give the value, or write {}=VALUE "
        "for a value that starts with '-'",
        printable(typed.spelling), printable(next), printable(typed.spelling)));
  }
  given.value = next;
  ++i;
  return given;
}

// Booleans from PET_ accept what torchrun's int() does (any integer: 0 is off, others on) and
// more: Kubeflow writes PET_STANDALONE="" to mean "on", which crashes torchrun.
bool parseEnvironmentBoolean(std::string_view value, const std::string& variable) {
  const std::string word = lowerCase(trim(value));
  if (word.empty() || word == "true" || word == "yes") return true;
  if (word == "false" || word == "no") return false;
  const std::string_view digits =
      word.starts_with('+') || word.starts_with('-') ? std::string_view(word).substr(1) : word;
  if (const auto number = parseWholeNumber(digits)) return *number != 0;
  throw UsageError(
      fmt::format("{} {} is not a boolean; use 1/0, true/false, yes/no, or an empty value for true",
                  variable, quote(value)));
}

}  // namespace

std::string label(const GivenValue& given) {
  const bool address = given.spec != nullptr && given.spec->address;
  return fmt::format("{} {}", printable(given.origin),
                     quote(address ? common::withoutUserinfo(given.value) : given.value));
}

std::string example(const GivenValue& given, std::string_view value) {
  return fmt::format("{}{}{}", printable(given.origin), given.fromEnvironment ? "=" : " ", value);
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
    GivenValue given = takeOption(argc, argv, i);
    const std::string_view name = given.spec->name;
    split.options.insert_or_assign(name, std::move(given));
  }
  return split;
}

void addEnvironmentFallbacks(SplitArguments& split, const Environment& environment) {
  for (const auto& spec : options()) {
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
  // Kubeflow's training-operator up to v1.5 wrote elasticPolicy.nProcPerNode as
  // PET_N_PROC_PER_NODE, a name torchrun never reads (its pods then ran one worker each); later
  // versions write PET_NPROC_PER_NODE, which wins when both are set.
  const std::string* legacy = lookup(environment, "PET_N_PROC_PER_NODE");
  if (legacy != nullptr && !split.options.contains("nproc-per-node")) {
    split.options.emplace("nproc-per-node", GivenValue{&longOption("--nproc-per-node"), *legacy,
                                                       "PET_N_PROC_PER_NODE", true});
  }
}

}  // namespace ddprun::launcher::cli_detail
