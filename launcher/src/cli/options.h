// The option table: one row per torchrun option (plus ddprun's own), and what is derived from
// it: the underscore spelling, the PET_ variable, the metavar, the lookup of a spelling as typed,
// and the --help text.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

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
// What a long option's name as typed (without "--") means in `table`, as argparse's allow_abbrev
// reads it: the option spelled exactly so (dashes or underscores), which always wins; else the
// options that name is a prefix of, in either spelling. Both spellings of one option are one
// candidate (torchrun 1.13 has one spelling, so there --nproc is --nproc_per_node).
struct LongOptionMatch {
  const OptionSpec* option = nullptr;         // exact, or the only candidate
  std::vector<const OptionSpec*> candidates;  // prefix matches; two or more: ambiguous
};
LongOptionMatch matchLongOption(std::string_view name, std::span<const OptionSpec> table);

// The option a long spelling as typed ("--nproc_per_node", "--nproc_per") means; throws
// UsageError naming the fix for a spelling that is ambiguous or means none. Only options before
// the training script are read, so prefixes never reach the script's own arguments.
const OptionSpec& longOption(std::string_view spelling);
// -m, -r, -t, -h; nullptr for any other letter.
const OptionSpec* shortOption(char letter);

// ddprun --help, laid out as argparse does.
std::string helpText();

}  // namespace ddprun::launcher::cli_detail
