#include "cli/subcommands.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "cli/completion.h"
#include "cli/detach.h"

namespace ddprun::launcher {

bool isSubcommandName(std::string_view name) {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

void Subcommands::add(Subcommand subcommand) {
  if (!isSubcommandName(subcommand.name)) {
    throw std::invalid_argument(fmt::format(
        "subcommand name '{}' could be a training script; use [a-z][a-z0-9-]*", subcommand.name));
  }
  const bool taken = std::any_of(table_.begin(), table_.end(),
                                 [&](const Subcommand& s) { return s.name == subcommand.name; });
  if (taken) throw std::invalid_argument("subcommand '" + subcommand.name + "' is added twice");
  table_.push_back(std::move(subcommand));
}

const Subcommand* Subcommands::select(int argc, const char* const* argv) const {
  if (argc < 2 || argv[1] == nullptr) return nullptr;
  const std::string_view first = argv[1];
  const auto it = std::find_if(table_.begin(), table_.end(),
                               [&](const Subcommand& s) { return s.name == first; });
  return it == table_.end() ? nullptr : &*it;
}

std::string Subcommands::helpSection() const {
  if (table_.empty()) return {};
  std::string out =
      "\nsubcommands (the first argument, exactly; a training script of the same name runs as "
      "./NAME or after --):\n";
  for (const auto& subcommand : table_) {
    out += fmt::format("  {:<21} {}\n", subcommand.name, subcommand.summary);
  }
  return out;
}

std::vector<std::string> subcommandArguments(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i] == nullptr ? "" : argv[i]);
  return args;
}

std::string shadowedFileNote(const Subcommand& subcommand) {
  struct stat info {};
  if (::stat(subcommand.name.c_str(), &info) != 0) return {};
  return fmt::format(
      "'{}' is ddprun's subcommand; to run the file of that name as a training script, write "
      "ddprun [options] ./{}",
      subcommand.name, subcommand.name);
}

namespace {

Subcommands& ownTable() {
  static Subcommands table = [] {
    Subcommands subcommands;
    // One add() per subcommand of cli/'s own; the rooms above add theirs (addDdprunSubcommand).
    subcommands.add(detachSubcommand());
    subcommands.add(completionSubcommand());
    return subcommands;
  }();
  return table;
}

}  // namespace

const Subcommands& ddprunSubcommands() { return ownTable(); }

void addDdprunSubcommand(Subcommand subcommand) { ownTable().add(std::move(subcommand)); }

}  // namespace ddprun::launcher
