// The directories one run of the agent writes into, made when it starts and removed when it ends
// (and, through the guardian, even after kill -9):
//
//   log run dir   with --log-dir D: "D/<run id>_XXXXXX", this run's own (as torchrun makes it), so
//                 a second run with the same id never writes into another's files; -r/-t without
//                 --log-dir get a fresh "$TMPDIR/ddprun_logs_XXXXXX" as D (as torchrun does);
//   scratch dir   without --log-dir: "$TMPDIR/ddprun-<agent pid>-XXXXXX", the workers' error files;
//                 kept when the failure summary points into it, as torchrun keeps its own;
//   private dir   "$TMPDIR/ddprun-agent-XXXXXX": the heartbeat files, the Python stack hook's
//                 python/ and its dumps, the FileTimer pipe; always removed. Two directories in
//                 all (this one and python/): every directory costs a launch a mkdir and a
//                 removal that can wait on the file system's journal (docs/benchmarks.md,
//                 "Launch at the floor").
//
// Every one is a fresh mkdtemp (mode 0700, common::makePrivateDirectory), and each is registered
// with the guardian as soon as it exists. Before anything is made, TMPDIR and --log-dir are
// checked for other users who could write into them (common::directoryExposures; the .cc says
// what is refused and what warned about). Thread safety: used by the agent's main thread only.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

class Guardian;

// Where the run's temporary directories go, chosen as Python's tempfile.gettempdir() chooses
// (torchrun's come from it): the first usable of TMPDIR, TEMP, TMP, /tmp, /var/tmp, /usr/tmp and
// the working directory, absolute; one warning line names what was skipped and why. Throws
// StartupError when none is usable.
std::filesystem::path temporaryDirectoryFor(const std::map<std::string, std::string>& environment);

class RunDirectories {
 public:
  // Makes the directories `config` needs; a -r/-t run without --log-dir gets its log dir here
  // (config.logs.dir is set to it). `guardian` (may be null) removes the scratch and private
  // directories if the agent is killed. Throws StartupError naming the directory and the fix
  // (one another user can write into, too).
  // `environment` is the agent's (TMPDIR, TEMP, TMP: temporaryDirectoryFor).
  RunDirectories(LaunchConfig& config, const std::map<std::string, std::string>& environment,
                 Guardian* guardian);
  // Removes the private directory, and the scratch directory unless keepScratch() was called.
  ~RunDirectories();
  RunDirectories(const RunDirectories&) = delete;
  RunDirectories& operator=(const RunDirectories&) = delete;

  const std::string& logRunDir() const { return logRunDir_; }    // "" without --log-dir
  const std::string& scratchDir() const { return scratchDir_; }  // "" with --log-dir
  const std::string& privateDir() const { return privateDir_; }
  // The failure summary names files in the scratch directory: leave it for the user.
  void keepScratch() { keepScratch_ = true; }

 private:
  std::string logRunDir_;
  std::string scratchDir_;
  std::string privateDir_;
  bool keepScratch_ = false;
};

}  // namespace ddprun::launcher
