#include "cli/legacy_launch.h"

#include <fmt/format.h>

#include <cstdio>
#include <utility>

#include "cli/cli.h"
#include "cli/entry_point.h"
#include "cli/given_values.h"
#include "cli/torch_version.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using cli_detail::quote;

constexpr const char* kUsage =
    "ddprun launch [OPTIONS] [--use-env] [--local-rank-arg local_rank|local-rank] "
    "training_script [args...]";

std::string launchHelp() {
  return fmt::format(
      "usage: {}\n"
      "\n"
      "Runs a job written for `python -m torch.distributed.launch`, unchanged: the same command\n"
      "line (torchrun's options, all of which ddprun takes, plus --use-env or --use_env) and,\n"
      "unless --use-env is given, each worker's local rank passed as torch.distributed.launch\n"
      "passes it: right after the training script, before the script's own arguments, as\n"
      "--local_rank=N under torch 1.x and --local-rank=N under torch 2.x. The spelling follows "
      "the\n"
      "torch of the workers' interpreter ($PYTHON_EXEC, else python3 on PATH), read once per job;\n"
      "--local-rank-arg local_rank or local-rank forces it. With --use-env nothing is passed and\n"
      "the script reads LOCAL_RANK from its environment, as under plain ddprun. Everything else "
      "is\n"
      "ddprun's (ddprun --help). docs/env_contract.md, \"Scripts written for\n"
      "torch.distributed.launch\", has the two-line change that moves a script to LOCAL_RANK.\n",
      kUsage);
}

bool isUseEnv(const std::string& word) { return word == "--use-env" || word == "--use_env"; }

// --local-rank-arg's value: the argument's spelling, as a worker's argv gets it.
std::string rankArgument(const std::string& value, const std::string& origin) {
  if (value == "local_rank" || value == "local-rank") return "--" + value;
  throw UsageError(
      fmt::format("{} {}: the spelling is local_rank (torch 1.x) or local-rank "
                  "(torch 2.x); e.g. --local-rank-arg local_rank",
                  origin, quote(value)));
}

}  // namespace

LegacyLaunch legacyLaunchCommandLine(const std::vector<std::string>& args,
                                     const Environment& environment,
                                     const TorchVersionProbe& probe) {
  // The launch-only words are taken out wherever they are, the script is found in what is left
  // with ddprun's own option table, and those that stood after the script go back: they are
  // the script's.
  struct Taken {
    std::size_t at = 0;     // index in args of the word, or of the option of a pair
    std::size_t words = 1;  // 1, or 2 for "--local-rank-arg VALUE"
    std::optional<std::string> rankArg;
  };
  std::vector<Taken> taken;
  std::vector<std::string> kept = {"ddprun"};
  std::vector<std::size_t> keptAt = {0};  // args index of kept[i] (kept[0] is argv[0])
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      for (; i < args.size(); ++i) {
        kept.push_back(args[i]);
        keptAt.push_back(i);
      }
      break;
    }
    if (isUseEnv(word)) {
      taken.push_back({i, 1, std::nullopt});
    } else if (word.starts_with("--local-rank-arg=") || word.starts_with("--local_rank_arg=")) {
      const std::string option = word.substr(0, word.find('='));
      taken.push_back({i, 1, rankArgument(word.substr(word.find('=') + 1), option)});
    } else if (word == "--local-rank-arg" || word == "--local_rank_arg") {
      if (i + 1 >= args.size()) {
        throw UsageError(word + " needs a value: local_rank (torch 1.x) or local-rank (torch 2.x)");
      }
      taken.push_back({i, 2, rankArgument(args[i + 1], word)});
      ++i;
    } else {
      kept.push_back(word);
      keptAt.push_back(i);
    }
  }
  std::vector<const char*> words;
  for (const std::string& word : kept) words.push_back(word.c_str());
  words.push_back(nullptr);
  const cli_detail::SplitArguments split =
      cli_detail::splitArguments(static_cast<int>(kept.size()), words.data());
  LegacyLaunch result;
  if (split.options.contains("help")) {
    result.helpRequested = true;
    result.helpText = launchHelp();
    return result;
  }
  const std::size_t script =
      split.scriptIndex > 0 ? keptAt[static_cast<std::size_t>(split.scriptIndex)] : args.size();

  bool useEnv = false;
  std::optional<std::string> forced;
  std::vector<bool> drop(args.size(), false);
  for (const Taken& item : taken) {
    if (item.at > script) continue;  // the script's own
    for (std::size_t k = 0; k < item.words; ++k) drop[item.at + k] = true;
    if (item.rankArg) {
      forced = item.rankArg;
    } else {
      useEnv = true;
    }
  }
  if (!useEnv && split.options.contains("no-python")) {
    throw UsageError(
        "--no-python without --use-env: torch.distributed.launch refuses it, since a program "
        "that is not Python is not given --local_rank; add --use-env and read LOCAL_RANK");
  }
  std::string argument;
  if (!useEnv && script < args.size()) {
    if (forced) {
      argument = *forced;
      result.note = fmt::format(
          "launch: each worker gets {}=LOCAL_RANK before the script's own arguments "
          "(--local-rank-arg), as torch.distributed.launch passes it",
          argument);
    } else {
      const std::string python = cli_detail::resolvePython(environment);
      const std::optional<std::string> version = probe(python);
      const std::optional<int> major = version ? cli_detail::torchMajor(*version) : std::nullopt;
      argument = major && *major < 2 ? "--local_rank" : "--local-rank";
      result.note = version
                        ? fmt::format(
                              "launch: each worker gets {}=LOCAL_RANK before the script's own "
                              "arguments, as torch.distributed.launch of torch {} ({}) passes it",
                              argument, *version, common::printable(python))
                        : fmt::format(
                              "launch: no torch found under {}; each worker gets {}=LOCAL_RANK "
                              "before the script's own arguments, as torch 2.x's "
                              "torch.distributed.launch passes it (--local-rank-arg local_rank "
                              "for torch 1.x's spelling)",
                              common::printable(python), argument);
    }
  }
  result.argv = {"ddprun"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (drop[i]) continue;
    result.argv.push_back(args[i]);
    // torchrun's ${local_rank}, expanded per worker (process/worker_env.cc).
    if (i == script && !argument.empty()) result.argv.push_back(argument + "=${local_rank}");
  }
  return result;
}

Subcommand launchSubcommand(RunJob runJob) {
  return {"launch",
          "run a job written for python -m torch.distributed.launch unchanged (ddprun launch "
          "--help)",
          [runJob = std::move(runJob)](const std::vector<std::string>& args,
                                       const Environment& environment) {
            const LegacyLaunch launch =
                legacyLaunchCommandLine(args, environment, [&](const std::string& python) {
                  return cli_detail::torchVersionOf(python, environment);
                });
            if (launch.helpRequested) {
              std::fputs(launch.helpText.c_str(), stdout);
              return 0;
            }
            if (!launch.note.empty())
              std::fprintf(stderr, "ddprun: note: %s\n", launch.note.c_str());
            return runJob(launch.argv, environment);
          }};
}

}  // namespace ddprun::launcher
