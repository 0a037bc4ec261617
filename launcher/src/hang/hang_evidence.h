// Evidence of a hung worker, taken before it is stopped: where every thread of it is.
//   - the kernel's view of each thread (/proc/<pid>/task/<tid>: name, state, wait channel and,
//     where readable, the kernel stack), for any worker;
//   - the Python stack of every thread, for a Python worker that loaded ddprun's stack hook
//     (python_stack_hook.h): faulthandler writes it into a file when the hook's signal arrives;
//   - a native backtrace of every thread when an unwinder is installed, within a budget (the
//     hung worker's kill, and so the group's restart, waits for it): eu-stack (elfutils) takes
//     ~30 ms even on a process that loaded libtorch, as it reads only the symbol tables of the
//     frames it shows; gdb reads every library's debug symbols first (seconds with libtorch) and
//     is used only when eu-stack is not installed. What the budget cuts short is said in a note;
//   - PyTorch's Flight Recorder dump, when the worker's environment turns the recorder on
//     (flight_recorder.h): asked for through its pipe first, and waited for beside the rest.
//
// collectHangEvidence blocks (for the budget at most); the agent calls it through
// EvidenceCollector, whose real implementation runs it on a thread of its own and hands the
// result back on the loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/event_loop.h"
#include "hang/flight_recorder.h"

namespace ddprun::launcher {

// One thread as the kernel sees it.
struct ThreadView {
  pid_t tid = 0;
  std::string name;  // /proc/.../comm
  char state = '?';  // R, S, D, T, Z... (/proc/.../stat)
  // /proc/.../wchan ("" or "0": running); for a sleeper whose wchan read "0", the top function
  // of its kernel stack
  std::string waitChannel;
  std::vector<std::string> kernelStack;  // /proc/.../stack, when readable
};

struct HangEvidence {
  pid_t pid = 0;
  std::vector<ThreadView> threads;
  std::string pythonStack;  // faulthandler's dump of every thread ("" = none)
  std::string nativeStack;  // the unwinder's backtrace of every thread ("" = none): gdb's
                            // "Thread N (...)" or eu-stack's "TID N:" headers, then "#k" frames
  std::vector<std::string> notes;  // what could not be collected, and why (one line each)
  // What came of asking the Flight Recorder for its dump (nothing: it was not asked).
  std::optional<FlightRecorderDump> flightRecorder;
  std::string savedTo;  // the file that holds text() ("" = it could not be written: see notes)

  // Everything, for the file in the log directory.
  std::string text() const;
  // At most `maxLines` lines that tell the most (the Python stack when there is one, else the
  // native one, else the kernel's view), for the failure summary.
  std::vector<std::string> summary(std::size_t maxLines) const;
};

struct EvidenceOptions {
  // Where the stack hook writes "<pid>.txt" (PythonStackHook::stackDir); "" = no Python stacks.
  std::string pythonStackDir;
  int pythonStackSignal = 0;  // the hook's signal (PythonStackHook::signal); 0 = none
  std::chrono::milliseconds pythonWait{1000};  // for the dump to appear and stop growing
  // The native unwinder's path ("" = none: no native backtrace): eu-stack when its file name
  // is "eu-stack", else a gdb (nativeStackTool).
  std::string debugger;
  // The debugger is killed after this; --hang-native-stack-budget sets the agent's.
  std::chrono::milliseconds debuggerBudget{400};
  // The most the Flight Recorder's dump is waited for, beside the stacks: the time their
  // collection may take anyway (the agent sets pythonWait + debuggerBudget).
  std::chrono::milliseconds flightRecorderWait{1400};
};

// eu-stack or gdb, by the tool's file name: their arguments and outputs differ.
enum class NativeStackTool { kGdb, kEuStack };
NativeStackTool nativeStackTool(const std::string& path);

// The command that prints the backtrace of every thread of `pid`.
std::vector<std::string> nativeStackCommand(const std::string& path, pid_t pid);

// Whether `line` of a native backtrace starts a thread: gdb's "Thread 2 (Thread 0x... (LWP n))"
// or eu-stack's "TID n:".
bool isNativeThreadHeader(const std::string& line);

// Blocking. Never throws: what fails becomes a note.
HangEvidence collectHangEvidence(pid_t pid, const EvidenceOptions& options);

// The seam the agent's state machine uses: collects the evidence of `pid` (and, given a
// `flightRecorder` target, its Flight Recorder dump, asked for before the stacks are taken and
// waited for beside them), writes all of it (text()) into the new file `saveTo` (its directory is
// made if need be), then calls `done` on the loop.
class EvidenceCollector {
 public:
  virtual ~EvidenceCollector() = default;
  virtual void collect(pid_t pid, std::string saveTo,
                       std::optional<FlightRecorderTarget> flightRecorder,
                       std::function<void(HangEvidence)> done) = 0;
};

// collectHangEvidence on a thread per request; results are posted to `loop`. The destructor
// waits for collections in flight (each is bounded by the options' budgets).
std::unique_ptr<EvidenceCollector> makeThreadedEvidenceCollector(EventLoop& loop,
                                                                 EvidenceOptions options);

}  // namespace ddprun::launcher
