#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <stdexcept>

extern char** environ;

namespace ddprun::test {

Subprocess::Subprocess(std::vector<std::string> argv, std::vector<std::string> extraEnvironment) {
  std::map<std::string, std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    environment[entry.substr(0, entry.find('='))] = entry;
  }
  for (std::string& entry : extraEnvironment) environment[entry.substr(0, entry.find('='))] = entry;
  std::vector<std::string> envStrings;
  for (auto& [name, entry] : environment) envStrings.push_back(entry);
  std::vector<char*> envp;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);

  int outPipe[2];
  int errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // The child starts with default signal handling and an empty mask, whatever the test blocked.
  sigset_t all;
  sigfillset(&all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &none);
  // Its own process group, so that the whole tree (a shell pipeline, a launcher's workers) can
  // be killed when the test ends.
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  const int rc = ::posix_spawnp(&pid_, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  if (rc != 0) {
    ::close(outPipe[0]);
    ::close(errPipe[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  out_.fd = outPipe[0];
  err_.fd = errPipe[0];
  out_.reader = std::thread([this] { drain(out_); });
  err_.reader = std::thread([this] { drain(err_); });
}

Subprocess::~Subprocess() {
  ::kill(-pid_, SIGKILL);  // whatever of the group is left, the child itself included
  wait(std::chrono::seconds(10));
  out_.reader.join();
  err_.reader.join();
  ::close(out_.fd);
  ::close(err_.fd);
}

void Subprocess::drain(Stream& stream) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    std::lock_guard lock(mutex_);
    if (n <= 0) {
      stream.closed = true;
      changed_.notify_all();
      return;
    }
    stream.text.append(buffer, static_cast<std::size_t>(n));
    changed_.notify_all();
  }
}

std::optional<std::string> Subprocess::readLine(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  std::size_t newline = std::string::npos;
  changed_.wait_for(lock, timeout, [&] {
    newline = out_.text.find('\n', out_.consumed);
    return newline != std::string::npos || out_.closed;
  });
  if (newline == std::string::npos) return std::nullopt;
  std::string line = out_.text.substr(out_.consumed, newline - out_.consumed);
  out_.consumed = newline + 1;
  return line;
}

std::string Subprocess::output() {
  std::lock_guard lock(mutex_);
  return out_.text;
}

std::string Subprocess::errors() {
  std::lock_guard lock(mutex_);
  return err_.text;
}

bool Subprocess::waitForError(const std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return err_.text.find(text) != std::string::npos; });
}

void Subprocess::signal(int signalNumber) { ::kill(pid_, signalNumber); }

std::optional<int> Subprocess::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int raw = 0;
    const pid_t done = ::waitpid(pid_, &raw, WNOHANG);
    if (done == pid_) {
      status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
      // Let the readers collect the last output (unless a grandchild still holds the pipes).
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::seconds(2), [this] { return out_.closed && err_.closed; });
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int portFromListeningLine(const std::string& line) {
  const auto colon = line.rfind(':');
  if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) return 0;
  try {
    return std::stoi(line.substr(colon + 1));
  } catch (...) {
    return 0;
  }
}

}  // namespace ddprun::test

#include <fstream>

#include "log_capture.h"

namespace ddprun::test {

std::size_t residentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace ddprun::test
