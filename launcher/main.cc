// ddprun: the per-node launcher. Runs a subcommand when the first argument names one; else parses
// the command line (torchrun's), starts the guardian while the process is still single-threaded,
// and runs the agent to the end of the job.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/legacy_launch.h"
#include "core/exit_codes.h"
#include "ddprun/common/process_environment.h"
#include "ddprun/common/text.h"
#include "ddprun/launcher/agent.h"
#include "hosts/ssh_driver.h"
#include "output/agent_log.h"
#include "process/guardian.h"
#include "status/status_command.h"

namespace {

// torchrun reads LOGLEVEL (default WARNING); so does ddprun.
spdlog::level::level_enum logLevel(const std::map<std::string, std::string>& environment) {
  auto it = environment.find("LOGLEVEL");
  if (it == environment.end()) return spdlog::level::warn;
  std::string name = it->second;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "warning") name = "warn";
  if (name == "critical" || name == "fatal") name = "critical";
  return spdlog::level::from_str(name);
}

// Bad input, from the command line or a subcommand's arguments: one line, and the exit code
// every bad input gets.
int usageFailure(const ddprun::launcher::UsageError& error) {
  using namespace ddprun::launcher;
  std::fprintf(stderr, "ddprun: error: %s\n", error.what());
  return exitCode(Ending::badInput(error.what()));
}

// The training job: torchrun's command line (argv[0] included) parsed, then the agent, or the
// ssh driver, to the end of the job. `ddprun launch` comes here with the command line it made.
int runJob(const std::vector<std::string>& words,
           const std::map<std::string, std::string>& environment) {
  using namespace ddprun::launcher;
  std::vector<const char*> argv;
  for (const std::string& word : words) argv.push_back(word.c_str());
  argv.push_back(nullptr);
  CommandLine commandLine;
  try {
    commandLine = parseCommandLine(static_cast<int>(words.size()), argv.data(), environment);
  } catch (const UsageError& error) {
    return usageFailure(error);
  } catch (const std::exception& error) {
    // A probe of the host that failed unexpectedly (a file system error, say): a bug, but one
    // line and the bad-input code, never an abort.
    return usageFailure(UsageError(ddprun::common::printable(error.what()) +
                                   " (an unexpected error: please report it with this line)"));
  }
  if (commandLine.helpRequested) {
    std::fputs(commandLine.helpText.c_str(), stdout);
    return 0;
  }
  if (commandLine.versionRequested) {
    std::printf("%s\n", versionText().c_str());
    return 0;
  }
  auto logger = spdlog::stderr_color_mt("ddprun");
  logger->set_pattern(kLogPattern);
  logger->set_level(logLevel(environment));
  // --event-log-handler console: the agent's events (rounds, failures, restarts) on stderr.
  if (commandLine.config.eventLogHandler == "console" && logger->level() > spdlog::level::info) {
    logger->set_level(spdlog::level::info);
  }
  spdlog::set_default_logger(logger);
  for (const std::string& note : commandLine.notes)
    std::fprintf(stderr, "ddprun: note: %s\n", note.c_str());
  if (!commandLine.interpreterNote.empty())
    std::fprintf(stderr, "ddprun: note: %s\n", commandLine.interpreterNote.c_str());
  for (const std::string& warning : commandLine.warnings) spdlog::warn("{}", warning);
  // --hosts / --hostfile: this ddprun drives one agent per host over ssh (docs/ssh.md).
  if (commandLine.sshLaunch) return hosts::runSshDriver(*commandLine.sshLaunch);

  // Before any thread exists: the guardian is a fork of this process and runs ordinary code.
  // (spdlog's logger above starts no thread.)
  auto guardian = Guardian::start();
  if (!guardian)
    spdlog::warn("could not start the guardian process; workers still die with the agent");
  const int code = runAgent(commandLine.config, environment, guardian.get());
  guardian.reset();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun::launcher;
  const std::map<std::string, std::string> environment = ddprun::common::processEnvironment();
  try {
    // status/ and the job's own path stand above cli/: main.cc joins them.
    addDdprunSubcommand(statusSubcommand());
    addDdprunSubcommand(launchSubcommand(runJob));
    if (const Subcommand* subcommand = ddprunSubcommands().select(argc, argv)) {
      if (const std::string note = shadowedFileNote(*subcommand); !note.empty()) {
        std::fprintf(stderr, "ddprun: note: %s\n", note.c_str());
      }
      return subcommand->run(subcommandArguments(argc, argv), environment);
    }
  } catch (const UsageError& error) {
    return usageFailure(error);
  }
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) words.emplace_back(argv[i] == nullptr ? "" : argv[i]);
  return runJob(words, environment);
}
