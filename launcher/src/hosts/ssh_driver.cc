#include "hosts/ssh_driver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/child_start.h"
#include "core/exit_codes.h"
#include "ddprun/common/safe_files.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/text.h"
#include "hosts/job_exit_code.h"
#include "hosts/ssh_command.h"

namespace ddprun::launcher::hosts {
namespace {

using Clock = std::chrono::steady_clock;

// A line longer than this is passed on in pieces: a worker printing without newlines must not
// make the driver hold unbounded bytes.
constexpr std::size_t kLongestLine = 64 * 1024;
// After a host's ssh exited, how long its pipes may stay open (a descendant of ssh holding them,
// say a ControlPersist master) before the driver stops waiting for their last bytes.
constexpr auto kDrainAfterExit = std::chrono::seconds(2);
// After a host's agent failed: how long the others have to end on their own (they learn a
// worker's failure through the rendezvous and exit with its code at about the same time) before
// they are stopped as on SIGTERM. A host whose agent never started its job (bad input there, exit
// 2) would otherwise leave the others waiting for it until their join timeout.
constexpr auto kFailureGrace = std::chrono::seconds(5);

// One of a host's output streams: whole lines go to `console` with "HOST: " in front.
struct Stream {
  int fd = -1;
  int console = STDOUT_FILENO;
  std::string pending;
};

struct Host {
  std::string name;
  pid_t pid = -1;
  int stdinFd = -1;  // the remote agent's stdin: open until the host is done
  Stream out;
  Stream err;
  std::optional<int> exitCode;
  std::optional<Clock::time_point> exitedAt;
  std::string lastErrLine;  // ssh's own reason when it fails
};

void emitLine(const Host& host, Stream& stream, std::string_view line) {
  (void)common::writeAll(stream.console, host.name + ": " + std::string(line) + "\n");
}

// ssh's own messages end in "\r\n", some in ".": the reason quoted in the driver's line (where a
// ';' follows it) is without either.
void noteErrLine(Host& host, std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '.')) {
    line.remove_suffix(1);
  }
  if (!line.empty()) host.lastErrLine = std::string(line);
}

void drainLines(Host& host, Stream& stream, bool atEnd) {
  std::size_t start = 0;
  while (true) {
    const std::size_t newline = stream.pending.find('\n', start);
    if (newline == std::string::npos) break;
    const std::string_view line(stream.pending.data() + start, newline - start);
    emitLine(host, stream, line);
    if (&stream == &host.err) noteErrLine(host, line);
    start = newline + 1;
  }
  stream.pending.erase(0, start);
  if (stream.pending.size() >= kLongestLine || (atEnd && !stream.pending.empty())) {
    emitLine(host, stream, stream.pending);
    if (&stream == &host.err) noteErrLine(host, stream.pending);
    stream.pending.clear();
  }
}

void readStream(Host& host, Stream& stream) {
  char buffer[16384];
  const ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    ::close(stream.fd);
    stream.fd = -1;
    drainLines(host, stream, /*atEnd=*/true);
    return;
  }
  stream.pending.append(buffer, static_cast<std::size_t>(n));
  drainLines(host, stream, /*atEnd=*/false);
}

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Starts host `index`'s ssh; everything the child needs is built before the fork.
void startHost(const SshLaunch& launch, std::size_t index, Host& host, const sigset_t& original) {
  const std::vector<std::string> words = sshArgv(launch, index);
  std::vector<char*> argv;
  for (const auto& word : words) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(
        fmt::format("cannot make pipes for host {}: {}", host.name, std::strerror(errno)));
  }
  ChildSteps steps;
  // Its own process group: a terminal's Ctrl-C is the driver's to pass on, once per host.
  steps.group = ChildSteps::Group::kNewGroup;
  steps.dieWithParent = ::getpid();
  steps.signals = ChildSteps::Signals::kDefault;
  steps.signalMask = &original;
  steps.stdinFd = in[0];
  steps.stdoutFd = out[1];
  steps.stderrFd = err[1];
  const SpawnedChild child = spawnChild(steps, argv[0], argv.data(), environ);
  if (child.failure) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    throw std::runtime_error(
        startFailureText(fmt::format("ssh for host {}", host.name), *child.failure));
  }
  const pid_t pid = child.pid;
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  host.pid = pid;
  host.stdinFd = in[1];
  ::fcntl(host.stdinFd, F_SETFL, O_NONBLOCK);
  host.out = {out[0], STDOUT_FILENO, {}};
  host.err = {err[0], STDERR_FILENO, {}};
  // The job's token first, before any signal byte: the agent reads this one line
  // (--token-from-stdin), then reads the rest as signals. The pipe is new and empty, so the line
  // fits whole; should ssh be gone already, its agent never ran, and the host fails as such.
  if (launch.token) (void)common::writeAll(host.stdinFd, *launch.token + "\n");
}

// Passes signal `sig` to a host's agent: one byte on its stdin (--stop-on-stdin-eof).
void tellHost(Host& host, int sig) {
  if (host.stdinFd < 0) return;
  const auto byte = static_cast<unsigned char>(sig);
  if (::write(host.stdinFd, &byte, 1) != 1 && errno != EAGAIN) closeFd(host.stdinFd);
}

bool done(const Host& host) { return host.exitCode && host.out.fd < 0 && host.err.fd < 0; }

}  // namespace

int runSshDriver(const SshLaunch& launch) {
  // The signals come through a signalfd, read in the loop with the hosts' output.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&handled, sig);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  // A signal ignored when the driver started (a shell's background job ignores SIGINT) would be
  // discarded, not queued: the driver passes them on, as the agent handles them, whatever it got.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::signal(sig, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signals < 0) {
    std::fprintf(stderr, "ddprun: error: cannot receive signals: %s\n", std::strerror(errno));
    return 1;
  }

  std::vector<Host> hosts(launch.agents.size());
  std::string names;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    hosts[i].name = common::printable(launch.agents[i].host);
    names += (i == 0 ? "" : ", ") + hosts[i].name;
  }
  (void)common::writeAll(
      STDERR_FILENO,
      fmt::format("ddprun: starting {} agent(s) over ssh on {} (store {}, run id {}, {})\n",
                  hosts.size(), names, common::printable(launch.rdzvEndpoint), launch.runId,
                  launch.token ? "a job token made for this launch" : "the job's token file"));
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    try {
      startHost(launch, i, hosts[i], original);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "ddprun: error: %s\n", error.what());
      for (auto& host : hosts) tellHost(host, SIGTERM);
      hosts.resize(i);  // the ones started are stopped below
      break;
    }
  }

  std::optional<int> signalled;     // the first signal the driver got
  std::optional<int> firstFailure;  // the first host's failing exit code
  std::optional<Clock::time_point> stopDeadline;
  std::optional<Clock::time_point> failureStop;  // when the others are stopped after a failure
  bool killed = false;
  const auto stopAll = [&](int sig) {
    for (auto& host : hosts) tellHost(host, sig);
    if (!stopDeadline) stopDeadline = Clock::now() + launch.stopGrace;
  };
  if (hosts.size() < launch.agents.size()) {
    firstFailure = 1;
    stopAll(SIGTERM);
  }

  while (true) {
    bool allDone = true;
    for (const auto& host : hosts) allDone = allDone && done(host);
    if (allDone) break;

    std::vector<pollfd> fds = {{signals, POLLIN, 0}};
    std::vector<std::pair<Host*, Stream*>> owners = {{nullptr, nullptr}};
    for (auto& host : hosts) {
      for (Stream* stream : {&host.out, &host.err}) {
        if (stream->fd < 0) continue;
        fds.push_back({stream->fd, POLLIN, 0});
        owners.emplace_back(&host, stream);
      }
    }
    const auto now = Clock::now();
    auto wait = std::chrono::milliseconds(1000);
    for (const auto& at : {stopDeadline, failureStop}) {
      if (at && !killed) {
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(*at - now));
      }
    }
    for (auto& host : hosts) {
      if (!host.exitedAt || done(host)) continue;
      if (now - *host.exitedAt >= kDrainAfterExit) {
        // Its pipes are held by something else: what they hold is not waited for.
        for (Stream* stream : {&host.out, &host.err}) {
          closeFd(stream->fd);
          drainLines(host, *stream, /*atEnd=*/true);
        }
      }
    }
    const int ready =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(0, wait.count())));
    if (ready < 0 && errno != EINTR) break;

    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && owners[i].second->fd >= 0)
        readStream(*owners[i].first, *owners[i].second);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (!signalled) signalled = sig;
        (void)common::writeAll(
            STDERR_FILENO,
            fmt::format("ddprun: got {}, passing it on to every host\n", common::signalName(sig)));
        stopAll(sig);
      }
    }
    // Reap every ssh that ended (SIGCHLD or not: a lost SIGCHLD costs at most the poll's second).
    for (auto& host : hosts) {
      if (host.exitCode) continue;
      int status = 0;
      const pid_t reaped = ::waitpid(host.pid, &status, WNOHANG);
      if (reaped != host.pid) continue;
      host.exitCode = shellExitCode(status);
      host.exitedAt = Clock::now();
      closeFd(host.stdinFd);
      if (*host.exitCode == 0) continue;
      if (*host.exitCode == kSshFailed && !killed) {
        (void)common::writeAll(
            STDERR_FILENO,
            fmt::format("ddprun: error: host {}: ssh failed (exit 255){}{}; check that "
                        "'ssh -o BatchMode=yes {} true' works from here; stopping the other "
                        "hosts\n",
                        host.name, host.lastErrLine.empty() ? "" : ": ",
                        common::printable(host.lastErrLine), host.name));
        if (!firstFailure) firstFailure = kSshFailed;
        stopAll(SIGTERM);
        continue;
      }
      if (!firstFailure) firstFailure = *host.exitCode;
      if (!failureStop) failureStop = Clock::now() + kFailureGrace;
    }
    if (failureStop && !stopDeadline && Clock::now() >= *failureStop) {
      bool others = false;
      for (const auto& host : hosts) others = others || !host.exitCode;
      if (others) {
        (void)common::writeAll(STDERR_FILENO,
                               "ddprun: a host's agent failed and the others are still running "
                               "5 s later; stopping them\n");
        stopAll(SIGTERM);
      }
    }
    if (stopDeadline && !killed && Clock::now() >= *stopDeadline) {
      // The hosts did not stop in time: cut their connections; each remote agent sees its stdin
      // close and stops on its own.
      killed = true;
      for (auto& host : hosts) {
        if (!host.exitCode) ::kill(host.pid, SIGKILL);
      }
    }
  }
  ::close(signals);
  ::sigprocmask(SIG_SETMASK, &original, nullptr);
  if (launch.exitCodes == ExitCodeScheme::kClasses) {
    std::vector<int> codes;
    for (const auto& host : hosts) codes.push_back(host.exitCode.value_or(1));
    if (hosts.size() < launch.agents.size()) codes.push_back(1);  // a host's ssh never started
    return worstHostClassCode(codes, signalled);
  }
  if (signalled) return 128 + *signalled;
  return firstFailure.value_or(0);
}

}  // namespace ddprun::launcher::hosts
