// Collecting a hung worker's evidence: the three collectors in order (evidence_kernel.cc,
// evidence_python.cc, evidence_native.cc), and the threaded collector that runs them off the loop
// and saves what they found.
#include "hang/hang_evidence.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <list>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "ddprun/common/safe_files.h"
#include "hang/evidence_parts.h"

namespace ddprun::launcher {

namespace {

using evidence::collectNativeStack;
using evidence::collectPythonStack;
using evidence::collectThreads;
using evidence::processState;

// Writes text() into `path` (off the loop: the text can be megabytes of gdb output). The file is
// new (O_EXCL, never through a link: the rank's directory is one the worker writes into too), in
// a directory of the agent's own (made if missing, never another user's).
void saveEvidence(HangEvidence& evidence, const std::string& path) {
  const std::string directory = std::filesystem::path(path).parent_path().string();
  std::optional<common::FileError> problem = common::ensureOwnDirectories(directory);
  if (!problem) {
    auto file = common::createNewFile(path, 0600);
    problem = file ? common::writeAll(file->get(), evidence.text()) : file.error();
    if (file && !problem && ::close(file->release()) != 0) {
      problem = common::FileError{common::FileProblem::kSystem, errno};
    }
  }
  if (!problem) {
    evidence.savedTo = path;
  } else {
    evidence.notes.push_back(
        fmt::format("evidence: cannot write {}: {}", path, problem->describe()));
  }
}

class ThreadedEvidenceCollector final : public EvidenceCollector {
 public:
  ThreadedEvidenceCollector(EventLoop& loop, EvidenceOptions options)
      : loop_(loop), options_(std::move(options)) {}

  ~ThreadedEvidenceCollector() override {
    std::list<Job> jobs;
    {
      std::lock_guard lock(mutex_);
      jobs.swap(jobs_);
    }
    for (Job& job : jobs) {
      if (job.thread.joinable()) job.thread.join();
    }
  }

  void collect(pid_t pid, std::string saveTo, std::optional<FlightRecorderTarget> flightRecorder,
               std::function<void(HangEvidence)> done) override {
    std::lock_guard lock(mutex_);
    // Join the collections that have finished, so threads do not pile up.
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->finished->load()) {
        it->thread.join();
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    auto finished = std::make_shared<std::atomic<bool>>(false);
    jobs_.push_back(Job{std::thread([this, pid, saveTo = std::move(saveTo),
                                     flightRecorder = std::move(flightRecorder),
                                     done = std::move(done), finished]() mutable {
                          HangEvidence evidence;
                          try {
                            evidence = collectWithFlightRecorder(pid, flightRecorder);
                          } catch (...) {
                            evidence.pid = pid;
                            evidence.notes.push_back("evidence: collection failed unexpectedly");
                          }
                          saveEvidence(evidence, saveTo);
                          loop_.post(
                              [done = std::move(done), evidence = std::move(evidence)]() mutable {
                                done(std::move(evidence));
                              });
                          finished->store(true);
                        }),
                        finished});
  }

 private:
  // The Flight Recorder's request goes first, on a thread of its own: torch dumps asynchronously
  // while the stacks are taken, and the debugger (last) stops the process only briefly.
  HangEvidence collectWithFlightRecorder(pid_t pid,
                                         const std::optional<FlightRecorderTarget>& target) {
    if (!target) return collectHangEvidence(pid, options_);
    FlightRecorderDump dump;
    std::thread recorder;
    try {
      recorder = std::thread([&dump, &target, pid, wait = options_.flightRecorderWait] {
        dump = triggerFlightRecorder(*target, pid, wait);
      });
    } catch (const std::system_error&) {
      dump = triggerFlightRecorder(*target, pid, options_.flightRecorderWait);  // no thread: first
    }
    HangEvidence evidence = collectHangEvidence(pid, options_);
    if (recorder.joinable()) recorder.join();
    evidence.flightRecorder = std::move(dump);
    return evidence;
  }

  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };

  EventLoop& loop_;
  const EvidenceOptions options_;
  std::mutex mutex_;
  std::list<Job> jobs_;
};

}  // namespace

HangEvidence collectHangEvidence(pid_t pid, const EvidenceOptions& options) {
  HangEvidence evidence;
  evidence.pid = pid;
  try {
    if (pid <= 0) {
      // kill() would reach a process group or every process: never.
      evidence.notes.push_back(fmt::format("process {}: not a valid process id", pid));
      return evidence;
    }
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      evidence.notes.push_back(fmt::format("process {} does not exist (it has exited)", pid));
      return evidence;
    }
    const char state = processState(pid);
    if (state == '?') {
      evidence.notes.push_back(fmt::format("process {}: /proc/{}/stat is not readable", pid, pid));
    }
    if (state == 'Z' || state == 'X') {
      evidence.notes.push_back(
          fmt::format("process {} has exited (a zombie): no stacks to collect", pid));
      return evidence;
    }
    // The kernel's view first, as it was before the signal and the debugger disturb it.
    collectThreads(pid, evidence);
    if (options.pythonStackSignal != 0 && !options.pythonStackDir.empty()) {
      collectPythonStack(pid, options, evidence);
    }
    // The debugger last: it stops the process while it looks (and the Python dump needs it
    // running).
    if (!options.debugger.empty()) collectNativeStack(pid, options, evidence);
  } catch (const std::exception& error) {
    evidence.notes.push_back(fmt::format("evidence: collection failed: {}", error.what()));
  } catch (...) {
    evidence.notes.push_back("evidence: collection failed");
  }
  return evidence;
}

std::unique_ptr<EvidenceCollector> makeThreadedEvidenceCollector(EventLoop& loop,
                                                                 EvidenceOptions options) {
  return std::make_unique<ThreadedEvidenceCollector>(loop, std::move(options));
}

}  // namespace ddprun::launcher
