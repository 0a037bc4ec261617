#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace ddprun::test {

namespace {

std::string quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"$\\") == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string tail(const std::string& text, std::size_t bytes) {
  if (text.size() <= bytes) return text;
  return "[... " + std::to_string(text.size() - bytes) + " bytes before ...]" +
         text.substr(text.size() - bytes);
}

std::string statusText(int status) {
  return status > 128 ? "was killed by signal " + std::to_string(status - 128) + " (status " +
                            std::to_string(status) + ")"
                      : "exited with " + std::to_string(status);
}

}  // namespace

Subprocess::Subprocess(std::vector<std::string> argv, std::vector<std::string> extraEnvironment) {
  for (const auto& arg : argv) command_ += (command_.empty() ? "" : " ") + quoted(arg);
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
  if (!wait(std::chrono::seconds(10))) {
    std::cerr << "warning: still not reaped 10 s after SIGKILL: " << describe(2000) << std::endl;
  }
  // The readers end at EOF, which a descendant outside the group (its own session) may hold
  // off: they are stopped after a moment rather than waited for without end.
  {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(2), [this] { return out_.closed && err_.closed; });
  }
  stopReading_ = true;
  out_.reader.join();
  err_.reader.join();
  ::close(out_.fd);
  ::close(err_.fd);
}

void Subprocess::drain(Stream& stream) {
  char buffer[4096];
  for (;;) {
    pollfd ready{stream.fd, POLLIN, 0};
    const int polled = ::poll(&ready, 1, 100);
    if (polled == 0 && !stopReading_) continue;
    if (polled < 0 && errno == EINTR) continue;
    const ssize_t n = polled > 0 ? ::read(stream.fd, buffer, sizeof buffer) : 0;
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
  return changed_.wait_for(lock, timeout,
                           [&] { return err_.text.find(text) != std::string::npos; });
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
      changed_.wait_for(lock, std::chrono::seconds(2),
                        [this] { return out_.closed && err_.closed; });
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string Subprocess::describe(std::size_t tailBytes) {
  std::string state = "still running";
  if (status_) {
    state = statusText(*status_);
  } else {
    siginfo_t info{};
    // WNOWAIT: look without reaping, so that the caller's own wait() still gets the status.
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid_) {
      state = statusText(info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status);
    }
  }
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "pid " << pid_ << ", " << state << ": " << command_ << "\n"
      << "--- its stdout so far" << (out_.closed ? " (closed)" : "") << " ---\n"
      << tail(out_.text, tailBytes) << (out_.text.ends_with('\n') || out_.text.empty() ? "" : "\n")
      << "--- its stderr so far" << (err_.closed ? " (closed)" : "") << " ---\n"
      << tail(err_.text, tailBytes) << (err_.text.ends_with('\n') || err_.text.empty() ? "" : "\n");
  return out.str();
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

std::string processTree(const std::vector<pid_t>& roots) {
  struct Row {
    pid_t pid, ppid, pgid, sid;
    std::string text;
  };
  std::vector<Row> rows;
  std::string header;
  if (FILE* ps = ::popen("ps -eo pid,ppid,pgid,sid,stat,etime,args --forest 2>&1", "r")) {
    char buffer[4096];
    std::string line;
    while (::fgets(buffer, sizeof buffer, ps) != nullptr) {
      line += buffer;
      if (line.back() != '\n') continue;  // a line longer than the buffer: keep reading it
      Row row{};
      if (header.empty()) {
        header = line;
      } else if (std::istringstream(line) >> row.pid >> row.ppid >> row.pgid >> row.sid) {
        row.text = line;
        rows.push_back(std::move(row));
      }
      line.clear();
    }
    ::pclose(ps);
  }
  std::set<pid_t> wanted(roots.begin(), roots.end());
  for (const Row& row : rows) {
    if (wanted.count(row.pgid) != 0 || wanted.count(row.sid) != 0) wanted.insert(row.pid);
  }
  for (bool grew = true; grew;) {  // and every descendant, whatever its group or session
    grew = false;
    for (const Row& row : rows) {
      if (wanted.count(row.ppid) != 0 && wanted.insert(row.pid).second) grew = true;
    }
  }
  std::string out;
  for (const Row& row : rows) {
    if (wanted.count(row.pid) != 0) out += row.text;
  }
  if (out.empty()) {
    out = "(none of them, nor anything they started, is still there)\n";
  }
  return header + out;
}

std::string describeAll(const std::vector<Subprocess*>& processes) {
  std::string out;
  std::vector<pid_t> pids;
  for (Subprocess* process : processes) {
    out += process->describe();
    pids.push_back(process->pid());
  }
  return out + "--- the process tree under them now ---\n" + processTree(pids);
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
