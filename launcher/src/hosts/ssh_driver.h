// The driver of a launch over ssh: one OpenSSH client per host, each running that host's agent
// (ssh_command.h), their output streamed line by line with the host in front, signals passed on,
// and the job's exit code. docs/ssh.md has the failure model; in short:
//   - each ssh child gets PR_SET_PDEATHSIG(SIGKILL) and its own process group: it dies with the
//     driver, even a driver killed with SIGKILL, and a terminal's Ctrl-C reaches only the driver;
//   - a launch with a token of its own (SshLaunch::token) writes it as the first line on each
//     host's stdin, which that agent reads with --token-from-stdin before anything else;
//   - each remote agent runs with --stop-on-stdin-eof and its stdin is a pipe the driver holds
//     open: a byte on it is a signal to act on as if it were its own (how SIGINT, SIGTERM, SIGHUP
//     and SIGQUIT are passed on: ssh without a terminal passes none), and EOF (the driver or the
//     connection gone) stops it as SIGTERM does, so nothing is left running on any host;
//   - ssh exits 255 for its own failures (no connection within ConnectTimeout, a refused login, a
//     connection lost); ddprun's agent never exits 255. Then one line names the host, the other
//     hosts are stopped, and the driver exits 255;
//   - a host's agent that exits non-zero fails the job: the other hosts get 5 s to end on their
//     own (they normally learn the failure through the rendezvous), then are stopped.
#pragma once

#include "hosts/ssh_launch.h"

namespace ddprun::launcher::hosts {

// ssh's exit code for its own failures, and the driver's when a host could not be reached.
constexpr int kSshFailed = 255;

// Runs the launch to its end and returns the job's exit code: 0 when every host's agent exited
// 0; 128+N after the driver got signal N (passed on to every host); 255 when ssh failed for a
// host; else the exit code of the first host whose agent failed. With --exit-codes classes
// (launch.exitCodes), the worst host's class instead (hosts/job_exit_code.h). REQUIRES:
// single-threaded.
int runSshDriver(const SshLaunch& launch);

}  // namespace ddprun::launcher::hosts
