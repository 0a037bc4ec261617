// `ddprun detach`'s command line (cli/detach.h): what it accepts, what it refuses in one line,
// and how the dispatcher finds it without taking a training script named `detach` away. Pure
// logic; tests/launcher/detach_test.py runs the subcommand with real processes.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/detach.h"
#include "cli/subcommands.h"

using namespace ddprun::launcher;
using Args = std::vector<std::string>;

TEST_CASE("detach: CMD and its arguments are taken untouched", "[detach]") {
  struct Case {
    Args args;
    Args command;
  };
  const Case cases[] = {
      {{"upload.sh"}, {"upload.sh"}},
      {{"--", "upload.sh", "a b", ""}, {"upload.sh", "a b", ""}},
      {{"sh", "-c", "sleep 2"}, {"sh", "-c", "sleep 2"}},
      // Everything from CMD on is CMD's: its own options, --help, another --.
      {{"tensorboard", "--help", "--", "-x"}, {"tensorboard", "--help", "--", "-x"}},
      {{"--", "--help"}, {"--help"}},  // a program named like an option, after --
      {{"--", "-x"}, {"-x"}},
      {{"--", "--"}, {"--"}},
  };
  for (const Case& c : cases) {
    INFO(Catch::Detail::stringify(c.args));
    const DetachRequest request = parseDetachArguments(c.args);
    CHECK_FALSE(request.help);
    CHECK(request.command == c.command);
  }
}

TEST_CASE("detach: --help before CMD", "[detach]") {
  for (const Args& args : {Args{"--help"}, Args{"-h"}, Args{"-h", "x"}}) {
    INFO(Catch::Detail::stringify(args));
    CHECK(parseDetachArguments(args).help);
  }
  const std::string help = detachHelpText();
  CHECK_THAT(help, Catch::StartsWith("usage: ddprun detach [--] CMD [ARGS...]\n") &&
                       Catch::Contains("outlives the job") && Catch::Contains("DDPRUN_DETACHED") &&
                       Catch::Contains("> upload.log 2>&1") &&
                       Catch::Contains("127 CMD not found") &&
                       Catch::Contains("Keeping a process after the job"));
}

TEST_CASE("detach: bad usage is one line naming the fix", "[detach]") {
  struct Case {
    Args args;
    std::string says;
  };
  const Case cases[] = {
      {{}, "detach: no command given; usage: ddprun detach [--] CMD [ARGS...]"},
      {{"--"}, "detach: no command given; usage: ddprun detach [--] CMD [ARGS...]"},
      {{""}, "detach: the command is empty; usage: ddprun detach [--] CMD [ARGS...]"},
      {{"--", ""}, "detach: the command is empty; usage: ddprun detach [--] CMD [ARGS...]"},
      {{"--nproc-per-node", "2", "train.py"},
       "detach: unknown option '--nproc-per-node'; usage: ddprun detach [--] CMD [ARGS...] (a "
       "command whose name starts with '-' goes after --)"},
      {{"-x"},
       "detach: unknown option '-x'; usage: ddprun detach [--] CMD [ARGS...] (a command "
       "whose name starts with '-' goes after --)"},
  };
  for (const Case& c : cases) {
    INFO(Catch::Detail::stringify(c.args));
    CHECK_THROWS_MATCHES(parseDetachArguments(c.args), UsageError, Catch::Message(c.says));
  }
}

TEST_CASE("detach: ddprun's subcommand, and a script named detach still runs as a job",
          "[detach]") {
  const Subcommands& own = ddprunSubcommands();
  auto selected = [&](std::vector<const char*> argv) {
    const Subcommand* subcommand = own.select(static_cast<int>(argv.size()), argv.data());
    return subcommand == nullptr ? std::string() : subcommand->name;
  };
  CHECK(selected({"ddprun", "detach", "--", "upload.sh"}) == "detach");
  CHECK(selected({"ddprun", "detach"}) == "detach");
  // torchrun's way to run a file named `detach`, as cli/subcommands.h's rule has it.
  CHECK(selected({"ddprun", "./detach"}).empty());
  CHECK(selected({"ddprun", "--", "detach"}).empty());
  CHECK(selected({"ddprun", "--no-python", "detach"}).empty());
  CHECK(selected({"ddprun", "train.py", "detach"}).empty());
  CHECK_THAT(own.helpSection(),
             Catch::Contains("  detach ") && Catch::Contains("outlives the job"));
}
