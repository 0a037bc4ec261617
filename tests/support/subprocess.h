// Subprocess: runs a real program for a test, with its stdout and stderr collected by background
// threads (so a chatty child never blocks on a full pipe), and is killed if the test ends first.
// Waiting on one with a bound and saying what was seen when the bound passes: waits.h.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddprun::test {

class Subprocess {
 public:
  // `extraEnvironment` entries ("NAME=value") are added to (or replace in) the test's environment.
  explicit Subprocess(std::vector<std::string> argv,
                      std::vector<std::string> extraEnvironment = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // The command line, for messages.
  const std::string& command() const { return command_; }
  // The next complete stdout line (without '\n'), or nothing if none arrives in time.
  std::optional<std::string> readLine(std::chrono::milliseconds timeout);
  // Everything written to stdout / stderr so far.
  std::string output();
  std::string errors();
  // Blocks until stderr contains `text` or the timeout passes.
  bool waitForError(const std::string& text, std::chrono::milliseconds timeout);
  void signal(int signalNumber);
  // The exit status (exit code, or 128 + signal), or nothing if still running after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  // For a failure message: the command, its pid, how it exited or that it still runs, and the
  // last `tailBytes` of its stdout and stderr so far. Reaps nothing.
  std::string describe(std::size_t tailBytes = 6000);

 private:
  struct Stream {
    int fd = -1;
    std::string text;
    std::size_t consumed = 0;  // readLine() position
    bool closed = false;
    std::thread reader;
  };
  void drain(Stream& stream);

  pid_t pid_ = -1;
  std::string command_;
  std::optional<int> status_;
  std::atomic<bool> stopReading_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  Stream out_;
  Stream err_;
};

// "127.0.0.1:1234" -> 1234 from a "listening on HOST:PORT" line; 0 if it does not parse.
int portFromListeningLine(const std::string& line);

// `ps -eo pid,ppid,pgid,sid,stat,etime,args --forest`, only the rows of `roots`, their
// descendants, and whatever is in a process group or session one of them leads.
std::string processTree(const std::vector<pid_t>& roots);

// For a failure message: each process's describe(), then the process tree under all of them.
std::string describeAll(const std::vector<Subprocess*>& processes);

}  // namespace ddprun::test
