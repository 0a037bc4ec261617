#include "cli/completion.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "cli/cli.h"
#include "cli/helpers.h"

namespace ddprun::launcher {
namespace {

using cli_detail::OptionSpec;
using cli_detail::ValueKind;

constexpr const char* kUsage = "ddprun completion bash";

// Words go into the script unquoted (case patterns, compgen -W): only characters that mean
// nothing to bash.
const std::string& plainWord(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
  if (!plain) throw std::logic_error("completion: '" + word + "' is not a plain word");
  return word;
}

// --nproc-per-node and --nproc_per_node, and -r for a row with a short name.
std::vector<std::string> spellings(const OptionSpec& spec) {
  std::vector<std::string> out;
  if (spec.shortName != 0) out.push_back(plainWord(std::string{'-', spec.shortName}));
  out.push_back(plainWord("--" + std::string(spec.name)));
  const std::string other = "--" + cli_detail::underscored(spec.name);
  if (other != out.back()) out.push_back(plainWord(other));
  return out;
}

std::string joined(const std::vector<std::string>& words, std::string_view separator) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : std::string(separator)) + word;
  return out;
}

}  // namespace

std::string bashCompletion(std::span<const OptionSpec> table, const Subcommands& subcommands) {
  std::vector<std::string> allSpellings;
  std::vector<std::string> valued;
  std::string choiceCases;
  for (const OptionSpec& spec : table) {
    const std::vector<std::string> names = spellings(spec);
    allSpellings.insert(allSpellings.end(), names.begin(), names.end());
    if (spec.kind == ValueKind::kFlag) continue;
    valued.insert(valued.end(), names.begin(), names.end());
    std::vector<std::string> choices;
    for (const auto values : {spec.choices, spec.suggestions}) {
      for (const std::string_view value : values) choices.push_back(plainWord(std::string(value)));
    }
    if (choices.empty()) continue;
    choiceCases +=
        fmt::format("    {}) _ddprun_offer '{}' ;;\n", joined(names, "|"), joined(choices, " "));
  }
  std::vector<std::string> names;
  for (const Subcommand& subcommand : subcommands.all())
    names.push_back(plainWord(subcommand.name));
  const std::string subcommandPattern = names.empty() ? "''" : joined(names, "|");

  return fmt::format(
      R"(# bash completion for ddprun {version}, written by `ddprun completion bash` from ddprun's
# option table: install it as /usr/share/bash-completion/completions/ddprun, or run
# `source <(ddprun completion bash)`.

# Whether $1 is an option that takes a value (the next word, or after '=').
_ddprun_takes_value() {{
  case $1 in
    {valued}) return 0 ;;
  esac
  return 1
}}

# COMPREPLY: the words of $1 that start with $cur.
_ddprun_offer() {{
  COMPREPLY=($(compgen -W "$1" -- "$cur"))
}}

_ddprun() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev= i word
  COMPREPLY=()
  ((COMP_CWORD > 0)) && prev=${{COMP_WORDS[COMP_CWORD - 1]}}
  # --name=VALUE: bash breaks the word at '=' (COMP_WORDBREAKS).
  if [[ $cur == = ]]; then
    cur=
  elif [[ $prev == = ]] && ((COMP_CWORD > 1)); then
    prev=${{COMP_WORDS[COMP_CWORD - 2]}}
  fi

  # A subcommand takes over the words after it: -h/--help, else files.
  if ((COMP_CWORD > 1)); then
    case ${{COMP_WORDS[1]}} in
      {subcommands})
        [[ $cur == -* ]] && _ddprun_offer '-h --help'
        return 0 ;;
    esac
  fi

  # Options end at the training script (or "--"): past it, files for the script's arguments.
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${{COMP_WORDS[i]}}
    if _ddprun_takes_value "$word"; then
      ((i++))
      [[ ${{COMP_WORDS[i]}} == = ]] && ((i++))
      continue
    fi
    [[ $word == -- ]] && return 0
    [[ $word == -* || $word == = ]] && continue
    return 0
  done

  if _ddprun_takes_value "$prev"; then
    case $prev in
{choices}    esac
    return 0
  fi
  if [[ $cur == -* ]]; then
    _ddprun_offer '{options}'
    return 0
  fi
  if ((COMP_CWORD == 1)); then
    _ddprun_offer '{subcommandWords}'
  fi
  return 0
}}

# -o default: files where _ddprun offers nothing (the script, its arguments, free values).
complete -o default -F _ddprun ddprun
)",
      fmt::arg("version", DDPRUN_VERSION), fmt::arg("valued", joined(valued, "|")),
      fmt::arg("subcommands", subcommandPattern), fmt::arg("choices", choiceCases),
      fmt::arg("options", joined(allSpellings, " ")),
      fmt::arg("subcommandWords", joined(names, " ")));
}

Subcommand completionSubcommand() {
  return {"completion", "the bash completion script, for `source <(ddprun completion bash)`",
          [](const std::vector<std::string>& args, const Subcommand::Environment&) {
            if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
              std::printf(
                  "usage: %s\n\nWrites the bash completion script for ddprun's options, their "
                  "choices and its subcommands\nto stdout. The Debian package installs it as "
                  "/usr/share/bash-completion/completions/ddprun;\nelsewhere: source <(ddprun "
                  "completion bash)\n",
                  kUsage);
              return 0;
            }
            if (args.size() != 1 || args[0] != "bash") {
              const std::string what =
                  args.empty() ? "no shell given"
                               : fmt::format("{} is not a shell ddprun writes completion for",
                                             cli_detail::quote(args[0]));
              throw UsageError(fmt::format("completion: {}; usage: {}", what, kUsage));
            }
            std::fputs(bashCompletion(cli_detail::options(), ddprunSubcommands()).c_str(), stdout);
            return 0;
          }};
}

}  // namespace ddprun::launcher
