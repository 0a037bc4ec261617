// Subcommands ahead of torchrun's grammar: `ddprun NAME ARGS...` runs the subcommand NAME instead
// of a training job, so that commands such as `ddprun status` can live next to `ddprun train.py`.
//
// The rule, chosen so that no torchrun command line changes meaning:
//   - only the first argument selects, and only when it is exactly a subcommand's name (no
//     prefixes, no PET_ variable);
//   - a name is lower-case letters, digits and '-', starting with a letter, so a path (anything
//     with a '/'), a .py file, a module name with a '.' or an option is never a subcommand;
//   - a training script named like a subcommand still runs when written as a path (ddprun
//     ./status), after "--" (ddprun -- status), or after any option (ddprun --nproc-per-node 2
//     status): only the torchrun grammar reads past the first argument.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher {

struct Subcommand {
  using Environment = std::map<std::string, std::string>;
  // Runs with the arguments after the name, untouched; returns the exit code, and throws
  // UsageError (cli.h) for bad input, which the caller reports like any other.
  using Run = std::function<int(const std::vector<std::string>& args, const Environment&)>;

  std::string name;     // [a-z][a-z0-9-]*
  std::string summary;  // one line for --help
  Run run;
};

class Subcommands {
 public:
  // Throws std::invalid_argument for a name that breaks the rule above or is taken already:
  // a programming error, found by the first test that builds the table.
  void add(Subcommand subcommand);

  // The subcommand argv[1] names exactly, or nullptr: then argv is a training job.
  const Subcommand* select(int argc, const char* const* argv) const;

  bool empty() const { return table_.empty(); }
  const std::vector<Subcommand>& all() const { return table_; }

  // The "subcommands:" section of --help; "" when there are none.
  std::string helpSection() const;

 private:
  std::vector<Subcommand> table_;
};

// Whether `name` may be a subcommand's name: [a-z][a-z0-9-]*.
bool isSubcommandName(std::string_view name);

// The arguments after a selected subcommand's name (argv[2...]).
std::vector<std::string> subcommandArguments(int argc, const char* const* argv);

// When the working directory has a file named like the selected subcommand: one line saying how
// to run the file instead (a torchrun user may have meant it); "" otherwise.
std::string shadowedFileNote(const Subcommand& subcommand);

// ddprun's own subcommands: `ddprun detach` (cli/detach.h), and the rows main.cc adds.
const Subcommands& ddprunSubcommands();

// Adds a row made in a room above cli/ (`ddprun status`, status/: it needs the store seam, which
// cli/ may not include). main.cc adds such rows first thing, before anything selects or lists
// the table. Throws as Subcommands::add.
void addDdprunSubcommand(Subcommand subcommand);

}  // namespace ddprun::launcher
