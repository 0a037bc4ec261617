// A launch over ssh, decided: what the driver (ssh_driver.h) runs on each host. The command line
// (cli/) builds it from --hosts/--hostfile, --include/--exclude and the job's own options; the
// driver only carries it out. docs/ssh.md describes the launch and its failure model.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher::hosts {

// One host's agent: the ssh destination, its --nproc-per-node and the CUDA_VISIBLE_DEVICES its
// selected slots give (nothing: the forwarded value, if any).
struct RemoteAgent {
  std::string host;
  std::string nprocPerNode;
  std::optional<std::string> cudaVisibleDevices;
};

struct SshLaunch {
  std::vector<RemoteAgent> agents;  // in order; the first hosts the store unless told otherwise
  std::string rdzvEndpoint;         // HOST:PORT every agent is given
  std::string runId;                // --rdzv-id every agent is given
  // The job's own options for every agent ("--max-restarts=3", ...), then "--", the training
  // script and its arguments, untouched.
  std::vector<std::string> agentArguments;
  // NAME=value pairs set on every remote agent (`export NAME='value' ...`), in name order.
  std::map<std::string, std::string> environment;
  std::string sshProgram;               // the OpenSSH client, an absolute path
  std::vector<std::string> sshOptions;  // the user's, placed before ddprun's own: theirs win
  std::chrono::seconds connectTimeout{10};
  // The job's token when the user gave none (--rdzv-conf token_file): made for this launch, and
  // written by the driver as the first line on each host's stdin, which the agent reads with
  // --token-from-stdin. Never a word of a command line, nor a variable of any process.
  std::optional<std::string> token;
  std::string remoteProgram;    // ddprun's path on the hosts
  std::string remoteDirectory;  // the working directory there (the local one)
  // After the driver passed on a signal: how long the hosts have to stop before their ssh
  // connections are cut (the remote agents then stop on their own: their stdin closed).
  std::chrono::milliseconds stopGrace{std::chrono::seconds(45)};
  // --exit-codes: the first failing host's code (root-cause), or the worst host's class
  // (classes: hosts/job_exit_code.h).
  ExitCodeScheme exitCodes = ExitCodeScheme::kRootCause;
};

}  // namespace ddprun::launcher::hosts
