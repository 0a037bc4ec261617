// `ddprun launch`'s command line (cli/legacy_launch.h): torch.distributed.launch's words turned
// into ddprun's, the local-rank argument where that launcher puts it and in its torch's spelling.
// Pure logic with a fixed torch version; tests/launcher/legacy_launch_test.py runs real jobs
// side by side with torch.distributed.launch.
#include "cli/legacy_launch.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/torch_version.h"

using namespace ddprun::launcher;
using Args = std::vector<std::string>;

namespace {

// An interpreter that exists on every test machine: resolvePython needs an executable file.
const Environment kEnvironment = {{"PYTHON_EXEC", "/bin/sh"}, {"PATH", "/usr/bin:/bin"}};

LegacyLaunch translate(const Args& args, std::optional<std::string> torch, int* probes = nullptr) {
  return legacyLaunchCommandLine(args, kEnvironment, [&](const std::string& python) {
    CHECK(python == "/bin/sh");
    if (probes != nullptr) ++*probes;
    return torch;
  });
}

}  // namespace

TEST_CASE("launch: the local rank goes right after the script, in its torch's spelling",
          "[legacy_launch]") {
  const Args args = {"--nproc_per_node", "2", "train.py", "--lr", "0.1"};
  const LegacyLaunch old = translate(args, "1.13.1");
  CHECK(old.argv == Args{"ddprun", "--nproc_per_node", "2", "train.py",
                         "--local_rank=${local_rank}", "--lr", "0.1"});
  CHECK_THAT(old.note, Catch::Contains("--local_rank=LOCAL_RANK") &&
                           Catch::Contains("torch 1.13.1 (/bin/sh)"));
  const LegacyLaunch recent = translate(args, "2.6.0+cpu");
  CHECK(recent.argv == Args{"ddprun", "--nproc_per_node", "2", "train.py",
                            "--local-rank=${local_rank}", "--lr", "0.1"});
  // No torch under the interpreter: torch 2.x's spelling, and the note says how to choose.
  const LegacyLaunch none = translate(args, std::nullopt);
  CHECK(none.argv.at(4) == "--local-rank=${local_rank}");
  CHECK_THAT(none.note,
             Catch::Contains("no torch found") && Catch::Contains("--local-rank-arg local_rank"));
  // A module: after its name, as torch.distributed.launch puts it.
  CHECK(translate({"-m", "pkg.train", "x"}, "1.13.1").argv ==
        Args{"ddprun", "-m", "pkg.train", "--local_rank=${local_rank}", "x"});
  // After "--".
  CHECK(translate({"--nnodes", "1", "--", "train.py"}, "2.1.0").argv ==
        Args{"ddprun", "--nnodes", "1", "--", "train.py", "--local-rank=${local_rank}"});
}

TEST_CASE(
    "launch: --use-env passes nothing and reads no torch, and after the script it is the script's",
    "[legacy_launch]") {
  for (const std::string spelling : {"--use_env", "--use-env"}) {
    int probes = 0;
    const LegacyLaunch launch =
        translate({spelling, "--nproc_per_node", "2", "train.py", "--use_env"}, "1.13.1", &probes);
    CHECK(launch.argv == Args{"ddprun", "--nproc_per_node", "2", "train.py", "--use_env"});
    CHECK(launch.note.empty());
    CHECK(probes == 0);
  }
  // --no-python needs --use-env, as torch.distributed.launch says.
  CHECK(translate({"--use_env", "--no_python", "/bin/echo"}, std::nullopt).argv ==
        Args{"ddprun", "--no_python", "/bin/echo"});
  CHECK_THROWS_WITH(
      translate({"--no_python", "/bin/echo"}, std::nullopt),
      Catch::Contains("--no-python without --use-env") && Catch::Contains("add --use-env"));
}

TEST_CASE("launch: --local-rank-arg forces the spelling, and a bad one is one line",
          "[legacy_launch]") {
  int probes = 0;
  CHECK(translate({"--local-rank-arg", "local_rank", "train.py"}, "2.6.0", &probes).argv ==
        Args{"ddprun", "train.py", "--local_rank=${local_rank}"});
  CHECK(translate({"--local-rank-arg=local-rank", "train.py"}, "1.13.1", &probes).argv ==
        Args{"ddprun", "train.py", "--local-rank=${local_rank}"});
  CHECK(probes == 0);
  CHECK_THROWS_WITH(translate({"--local-rank-arg", "rank", "train.py"}, std::nullopt),
                    Catch::Contains("local_rank (torch 1.x) or local-rank (torch 2.x)"));
  CHECK_THROWS_WITH(translate({"--local-rank-arg"}, std::nullopt),
                    Catch::Contains("needs a value"));
  // ddprun's own grammar judges the rest: an unknown option is still one line.
  CHECK_THROWS_AS(translate({"--no-such-option", "train.py"}, std::nullopt), UsageError);
}

TEST_CASE("launch: --help is the subcommand's own", "[legacy_launch]") {
  const LegacyLaunch launch = translate({"--help"}, std::nullopt);
  CHECK(launch.helpRequested);
  CHECK_THAT(launch.helpText, Catch::Contains("usage: ddprun launch") &&
                                  Catch::Contains("--local_rank=N under torch 1.x"));
}

TEST_CASE("launch: a torch version's major number", "[legacy_launch]") {
  using ddprun::launcher::cli_detail::torchMajor;
  CHECK(torchMajor("1.13.1") == 1);
  CHECK(torchMajor("2.6.0+cpu") == 2);
  CHECK(torchMajor("10.0") == 10);
  CHECK_FALSE(torchMajor("").has_value());
  CHECK_FALSE(torchMajor("x.1").has_value());
  CHECK_FALSE(torchMajor("2a").has_value());
}
