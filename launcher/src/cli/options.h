// The option table: one row per torchrun option (plus ddprun's own), and what is derived from
// it: the underscore spelling, the PET_ variable, the metavar, the lookup of a spelling as typed,
// and the --help text.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace ddprun::launcher::cli_detail {

enum class ValueKind { kFlag, kText, kInteger, kNumber };

struct OptionSpec {
  std::string_view name{};  // dashed long name without "--": the canonical key
  char shortName = 0;       // -m, -r, -t, -h
  ValueKind kind = ValueKind::kText;
  bool hasEnvironment = true;  // falls back to PET_<NAME>
  std::string_view metavar{};  // "" = the name upper-cased, as argparse prints it
  std::string_view help{};
};

// Every option, in --help order.
std::span<const OptionSpec> options();

// "nproc-per-node" -> "nproc_per_node".
std::string underscored(std::string_view name);
// PET_NPROC_PER_NODE.
std::string environmentName(const OptionSpec& spec);
// NPROC_PER_NODE, or the row's own ("{spawn,fork,forkserver}").
std::string metavar(const OptionSpec& spec);

// The row of a canonical (dashed) name; it must exist.
const OptionSpec& optionNamed(std::string_view name);
// The option a long spelling as typed ("--nproc_per_node") means; throws UsageError naming the
// fix for a spelling that means none.
const OptionSpec& longOption(std::string_view spelling);
// -m, -r, -t, -h; nullptr for any other letter.
const OptionSpec* shortOption(char letter);

// ddprun --help, laid out as argparse does.
std::string helpText();

}  // namespace ddprun::launcher::cli_detail
