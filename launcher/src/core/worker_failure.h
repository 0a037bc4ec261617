// A failed worker as every part of the agent names it: how it ended (WorkerFailure), why the
// agent stopped it if it did (HangKind), the exit code it gives the agent, and the one JSON form
// in which it travels between agents (inside a round's stop record). Reading error files, the
// root cause and torchrun's summary are report/failure_report.h's.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// Why the agent stopped a worker that was still running (docs/errors.md, "Hangs").
enum class HangKind {
  kNone,             // it ended by itself
  kNoProgress,       // --hang-timeout: silent for that long after reporting progress
  kNoFirstProgress,  // --hang-startup-timeout: never reported progress
  kAtExit,           // --exit-timeout: still running that long after a peer exited 0
  kFileTimer,        // a torch FileTimer it armed expired
  kNoStart,          // --start-timeout: wrote no line matching --start-pattern in time
  kFailPattern,      // wrote a line matching --fail-pattern (not hung: the user's failure)
};
// "no_progress", ...: the names in JSON (the store, events).
const char* hangKindName(HangKind kind);
std::optional<HangKind> hangKindFromName(const std::string& name);

// One failed worker, as the agent saw it and as its error file (if any) tells it.
// Thread safety: a plain value; no shared state.
struct WorkerFailure {
  int rank = -1;  // global rank
  int localRank = -1;
  int groupRank = -1;  // node rank
  std::string host;    // the node's host name, as printed in the summary
  long pid = -1;
  int exitCode = 0;       // exit status when it exited (meaningless when signal != 0)
  int signal = 0;         // the signal that killed it (0: it exited)
  double observedAt = 0;  // epoch seconds when the agent saw it end
  std::string errorFile;  // the worker's TORCHELASTIC_ERROR_FILE ("" = none)
  // Filled by loadErrorFile() when the error file exists:
  bool errorFileFound = false;  // the file existed (the summary then shows its path)
  std::string message;          // "ValueError: boom" (or the agent's own text, e.g. spawn errors)
  std::string traceback;        // extraInfo.py_callstack
  std::optional<double> errorTimestamp;  // extraInfo.timestamp (legacy: top-level timestamp)
  // What the agent knows beyond the exit status:
  HangKind hang = HangKind::kNone;  // the agent stopped it as hung
  std::string hangDetail;           // "no progress reported for 30.0 s (--hang-timeout 30)"
  // A hung worker: when the agent found it hung, and when the silence began (its last progress
  // report, or its start when it never reported) under the no-progress rules: epoch seconds.
  std::optional<double> hungAt;
  std::optional<double> silentSince;
  std::string oom;  // how the kernel's OOM killer is known to have killed it ("" = not)
  std::vector<std::string> stack;  // where it was when found hung (the telling lines)
  std::string evidenceFile;        // every thread's stacks, in full ("" = none)
  // PyTorch's Flight Recorder, asked for its dump before the kill (hang/flight_recorder.h): the
  // dump file ("" = none), and what to know of it or why there is none ("" = nothing to say).
  std::string flightRecorderDump;
  std::string flightRecorderNote;
  std::vector<std::string> stderrTail;  // its last stderr lines
  // It could not be started: the errno of the step that failed, and whether that step was the
  // exec of the program (its path, its rights: the user's) rather than the machine's (clone,
  // memory, the cgroup). Nothing: it started.
  struct StartFault {
    int error = 0;
    bool exec = false;
  };
  std::optional<StartFault> startFault;
  // Set by the agent that announces the failure: its node's round made progress before it (a
  // heartbeat advanced, a FileTimer request arrived, or the round ran --progress-min-time).
  bool progress = false;
};

// The agent's exit code for this failure: exitCode, or 128 + signal.
int exitCodeOf(const WorkerFailure& failure);

// A JSON form that travels between agents (through the store). message and traceback are capped
// at kMaxJsonText bytes each (their tails are kept: a traceback ends with the exception).
inline constexpr std::size_t kMaxJsonText = 64 * 1024;
nlohmann::json toJson(const WorkerFailure& failure);
// The inverse of toJson(); missing keys keep their defaults. Throws std::invalid_argument when
// `value` is not an object (and nlohmann::json::type_error when a key has the wrong type).
WorkerFailure failureFromJson(const nlohmann::json& value);

}  // namespace ddprun::launcher
