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
  // The only values the option takes (checkChoice refuses any other; shell completion offers
  // them); empty for a free value.
  std::span<const std::string_view> choices{};
  // Values shell completion offers where the option takes others too (--redirects 0:3,1:1).
  std::span<const std::string_view> suggestions{};
  std::string_view help{};
  // An address that may be typed as a URL: messages quote it without its user information
  // (common::withoutUserinfo), so a password written into it is never repeated.
  bool address = false;
  // An option of ddprun's own, which torchrun does not have: a prefix that also fits one of
  // torchrun's options means torchrun's (matchLongOption), so a script's abbreviations keep
  // meaning what they meant under torchrun (--re is --redirects beside --restart-backoff).
  bool ddprunOwn = false;
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
// reads torchrun 2.x's parser: the option spelled exactly so (dashes or underscores), which
// always wins; else every spelling the name is a prefix of. Each spelling counts on its own, as
// the two are separate option strings to argparse: --nproc_per and --nproc-per name one option,
// but --nproc (a prefix of --nproc-per-node and --nproc_per_node) is ambiguous, as in torchrun
// 2.6; torchrun 1.13 has only the underscore spelling and took it. ddprun's own options
// (OptionSpec::ddprunOwn) count only for a prefix that fits none of torchrun's.
struct LongOptionMatch {
  struct Candidate {
    const OptionSpec* option = nullptr;
    std::string spelling;  // "nproc_per_node"
  };
  const OptionSpec* option = nullptr;  // exact, or the only candidate
  std::vector<Candidate> candidates;   // prefix matches, in table order; two or more: ambiguous
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
