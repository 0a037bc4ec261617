#include "cli/detach.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include "cli/cli.h"
#include "cli/helpers.h"
#include "core/child_start.h"
#include "core/kept_process.h"
#include "core/own_cgroup.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {
namespace {

using cli_detail::Environment;
using cli_detail::quote;

constexpr std::string_view kUsage = "ddprun detach [--] CMD [ARGS...]";

// The agent's own cgroup.procs, when this process is in that agent's worker cgroup (cgroup v2):
// DDPRUN_AGENT is "<agent pid>-<random>" (docs/env_contract.md) and the worker cgroup is
// "<the agent's cgroup>/ddprun-<agent pid>". Nothing otherwise: no cgroup to leave.
std::optional<std::string> agentCgroupProcs(const Environment& environment) {
  const std::string* marker = cli_detail::lookup(environment, common::kEnvDdprunAgent);
  if (marker == nullptr) return std::nullopt;
  pid_t agent = 0;
  const auto [end, error] = std::from_chars(marker->data(), marker->data() + marker->size(), agent);
  if (error != std::errc() || end == marker->data() || agent <= 0) return std::nullopt;
  const auto own = ownCgroup();
  if (!own) return std::nullopt;
  const auto slash = own->rfind('/');
  if (slash == std::string::npos || own->substr(slash + 1) != workerCgroupName(agent))
    return std::nullopt;
  return own->substr(0, slash) + "/cgroup.procs";
}

// Whether descriptor `fd` is the job's and must not follow CMD out of it: a pipe, a socket or a
// FIFO (the worker's output pipes, a caller's capture), a terminal (the console, or the
// pseudo-terminal the agent gave the worker), or closed. A regular file, or /dev/null, stays.
bool belongsToJob(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return true;
  if (S_ISREG(info.st_mode) || S_ISBLK(info.st_mode)) return false;
  if (S_ISCHR(info.st_mode)) return ::isatty(fd) == 1;
  return true;
}

// The program CMD names, as execvp would find it on the PATH CMD gets; or the exit code and line
// for one that cannot run (nothing is started then).
struct Program {
  std::string path;
  int failureCode = 0;
  std::string problem;
};

Program resolve(const std::string& name, const Environment& environment) {
  if (auto found = common::findExecutable(name, environment)) return {*found, 0, {}};
  if (name.find('/') == std::string::npos) {
    return {
        {}, kCommandNotFound, fmt::format("detach: {}: command not found on PATH", quote(name))};
  }
  struct stat info {};
  if (::stat(name.c_str(), &info) != 0) {
    return {{}, kCommandNotFound, fmt::format("detach: {}: {}", quote(name), std::strerror(errno))};
  }
  return {
      {}, kCommandNotExecutable, fmt::format("detach: {}: not an executable file", quote(name))};
}

// The exit code of a failed start: the shell's for an exec that failed.
int exitCodeOf(const ChildFailure& failure) {
  if (failure.step != ChildStep::kExec) return kDetachFailed;
  return failure.error == ENOENT ? kCommandNotFound : kCommandNotExecutable;
}

int cannotLeaveCgroup(const std::string& procs, int error, const std::string& command) {
  std::fprintf(stderr,
               "ddprun: error: detach: cannot leave the job's cgroup (writing %s: %s); %s was not "
               "started\n",
               procs.c_str(), std::strerror(error), quote(command).c_str());
  return kDetachFailed;
}

int runDetach(const std::vector<std::string>& args, const Environment& environment) {
  const DetachRequest request = parseDetachArguments(args);
  if (request.help) {
    std::fputs(detachHelpText().c_str(), stdout);
    return 0;
  }
  const Environment kept = detachedEnvironment(environment);
  const Program program = resolve(request.command.front(), kept);
  if (program.failureCode != 0) {
    std::fprintf(stderr, "ddprun: error: %s\n", program.problem.c_str());
    return program.failureCode;
  }
  const auto cgroupProcs = agentCgroupProcs(environment);

  bool replaced[3];
  for (int fd = 0; fd < 3; ++fd) replaced[fd] = belongsToJob(fd);
  if (replaced[1] || replaced[2]) {
    std::fprintf(stderr,
                 "ddprun: note: detach: the output of %s goes to /dev/null (the job's pipes and "
                 "terminal close when it ends); to keep it, redirect it to a file: ddprun detach "
                 "-- CMD [ARGS...] > FILE 2>&1\n",
                 quote(request.command.front()).c_str());
  }

  std::vector<std::string> entries;
  for (const auto& [name, value] : kept) entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> words = request.command;
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);

  // The child: out of the job, then CMD. It leads a session of its own, out of the worker's
  // session and process group, which the agent signals and SIGKILLs at the end; out of the
  // worker cgroup; without the job's pipes and terminal; and, as the agent starts workers and as
  // Python's subprocess does by default, without any other descriptor of the worker's (a pipe of
  // the job held open would keep its reader waiting).
  ChildSteps steps;
  steps.group = ChildSteps::Group::kNewSession;
  steps.signals = ChildSteps::Signals::kInherit;
  int procs = -1;
  if (cgroupProcs) {
    procs = ::open(cgroupProcs->c_str(), O_WRONLY | O_CLOEXEC);
    if (procs < 0) return cannotLeaveCgroup(*cgroupProcs, errno, request.command.front());
    steps.cgroupProcs = procs;
  }
  const int devNull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devNull >= 0) {
    steps.stdinFd = replaced[0] ? devNull : -1;
    steps.stdoutFd = replaced[1] ? devNull : -1;
    steps.stderrFd = replaced[2] ? devNull : -1;
  }
  std::fflush(nullptr);
  const SpawnedChild child = spawnChild(steps, program.path.c_str(), argv.data(), envp.data());
  if (procs >= 0) ::close(procs);
  if (devNull >= 0) ::close(devNull);
  if (!child.failure) return 0;  // CMD runs, out of the job
  if (child.failure->step == ChildStep::kCgroup) {
    return cannotLeaveCgroup(*cgroupProcs, child.failure->error, request.command.front());
  }
  if (child.failure->step == ChildStep::kExec) {
    std::fprintf(stderr, "ddprun: error: detach: cannot run %s: %s\n", quote(program.path).c_str(),
                 std::strerror(child.failure->error));
  } else {
    std::fprintf(stderr, "ddprun: error: detach: %s\n",
                 startFailureText(quote(request.command.front()), *child.failure).c_str());
  }
  return exitCodeOf(*child.failure);
}

}  // namespace

DetachRequest parseDetachArguments(const std::vector<std::string>& args) {
  DetachRequest request;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      request.help = true;
      return request;
    }
    if (arg.starts_with("-")) {
      throw UsageError(
          fmt::format("detach: unknown option {}; usage: {} (a command whose name "
                      "starts with '-' goes after --)",
                      quote(arg), kUsage));
    }
    break;
  }
  if (i >= args.size())
    throw UsageError(fmt::format("detach: no command given; usage: {}", kUsage));
  if (args[i].empty())
    throw UsageError(fmt::format("detach: the command is empty; usage: {}", kUsage));
  request.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return request;
}

std::string detachHelpText() {
  return fmt::format(
      "usage: {}\n"
      "\n"
      "Runs CMD so that it outlives the job, on purpose: from a worker, for an uploader that must\n"
      "finish or a server that must keep running after the workers exit. ddprun kills everything\n"
      "else a worker leaves behind (torchrun kills nothing that left the worker).\n"
      "\n"
      "Returns once CMD has started outside the job: in its own session, out of the job's cgroup,\n"
      "with DDPRUN_DETACHED in place of DDPRUN_AGENT. Run it in the foreground:\n"
      "  ddprun detach -- ./upload.sh /ckpt/step100 > upload.log 2>&1\n"
      "  subprocess.run([\"ddprun\", \"detach\", \"--\", \"./upload.sh\", path], check=True,\n"
      "                 stdout=log, stderr=log)\n"
      "CMD's stdin, and its stdout and stderr unless redirected to a file, are /dev/null: the\n"
      "job's pipes close when it ends.\n"
      "\n"
      "exit codes: 0 CMD started; 1 CMD could not leave the job (not started); 2 bad usage;\n"
      "126 CMD is not executable; 127 CMD not found.\n"
      "See docs/env_contract.md, \"Keeping a process after the job\".\n",
      kUsage);
}

Subcommand detachSubcommand() {
  return {"detach", "run a command that outlives the job (from a worker: ddprun detach --help)",
          runDetach};
}

}  // namespace ddprun::launcher
