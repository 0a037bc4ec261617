// Describing failed workers the way torchrun does: decoding wait statuses, reading the error
// files written by `@record` (torch.distributed.elastic.multiprocessing.errors), choosing the root
// cause, printing ChildFailedError's summary, and passing the root cause on to a parent agent's
// TORCHELASTIC_ERROR_FILE. See docs: torchrun-contract §3.5-§3.7.
//
// Exit codes (a documented improvement over torchrun, which always exits 1): the agent exits with
// the root cause's exit code, or 128 + N when the root cause was killed by signal N (shell
// convention). The summary and the propagated error file keep torchrun's own conventions
// (a negative exit code for signals), so tools that parse them see what torchrun would write.
//
// Everything here is a pure function of its arguments except loadErrorFile (reads a file) and
// propagateErrorFile (reads and writes files); none of them logs.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/worker_failure.h"

namespace ddprun::launcher {

// Who a worker is, for fromWaitStatus().
struct WorkerIdentity {
  int rank = -1;
  int localRank = -1;
  int groupRank = -1;
  std::string host;
  long pid = -1;
  std::string errorFile;
};

// Decodes a waitpid() status. An exit with status 0 gives exitCode 0 (not a failure; callers
// decide). Throws std::invalid_argument for a status that is not a termination (stopped or
// continued).
WorkerFailure fromWaitStatus(int waitStatus, const WorkerIdentity& who, double observedAt);

// Reads failure.errorFile if it names an existing file and fills errorFileFound, message,
// traceback and errorTimestamp. Understands torchrun's schema
//   {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "<secs>"}}}
// and the legacy one ({"message": "<text>", "timestamp": <secs>}). A missing file (or a
// directory: torchrun's os.path.isfile) is not an error (fatal signals and sys.exit() leave none).
// Never throws and never blocks: the file is opened once, without following a link and without
// waiting on a FIFO, and read no further than 4 MiB; a file that is there but cannot be read
// (a link, a FIFO, larger than 4 MiB: "<error file PATH is larger than 4 MiB: not read>") or
// parsed sets errorFileFound and a message saying why (torchrun would crash, or block, or read it
// all). Returns whether the file existed.
bool loadErrorFile(WorkerFailure& failure);

// When the failure happened: the error file's timestamp when there is one (it is written before
// the worker exits), otherwise the time the agent observed the exit.
double failureTime(const WorkerFailure& failure);

// "exitcode 7" or "Signal 11 (SIGSEGV)" (ddprun::common::signalName).
std::string statusText(const WorkerFailure& failure);

// The root cause: the failure with the smallest failureTime(); ties go to the lowest rank.
// REQUIRES: failures is not empty (throws std::invalid_argument otherwise).
std::size_t rootCauseIndex(const std::vector<WorkerFailure>& failures);

// torchrun's ChildFailedError message, line for line:
//
//   ============================================================   ('=' * width, width <= 60)
//   train.py FAILED
//   ------------------------------------------------------------
//   Failures:
//     <NO_OTHER_FAILURES>                                          (or entries [i]:)
//   ------------------------------------------------------------
//   Root Cause (first observed failure):
//   [0]:
//     time      : YYYY-MM-DD_HH:MM:SS                              (local time)
//     host      : node-a
//     rank      : 1 (local_rank: 1)
//     exitcode  : 1 (pid: 18022)                                   (-N for signal N, as torchrun)
//     error_file: /logs/run/attempt_0/1/error.json                 (<N/A> when none was written)
//     traceback : Traceback (most recent call last): ...           (continuation lines indented)
//   ============================================================
//
// Entries are numbered in ascending rank order (torchrun numbers them in local-rank order, the
// same thing on one node). `rootCause` picks the root cause (default: rootCauseIndex()), for a
// caller that already knows the job-wide one. No leading or trailing newline (torchrun's
// message starts with one, after "ChildFailedError:"). REQUIRES: failures is not empty.
std::string formatSummary(const std::string& entrypoint, const std::vector<WorkerFailure>& failures,
                          std::optional<std::size_t> rootCause = std::nullopt);

// torchrun's propagation to a parent agent (`@record` on its own main): writes the root cause's
// error file to `parentErrorFile` with "errorCode" (the worker's exit code; -N for signal N, as
// torchrun) added inside "message". When the root cause has no readable error file on this node
// (a signal, sys.exit(), or a failure on another node) one is synthesized in the same schema from
// what is known (torchrun writes nothing then); so is it when the worker's file cannot be read
// here as loadErrorFile reads it. The file is replaced atomically, through a new file under a
// random name beside it (never one planted at a guessable name). Does nothing
// when parentErrorFile is empty. Throws std::system_error (naming the path) when it cannot write.
void propagateErrorFile(const WorkerFailure& rootCause, const std::string& parentErrorFile);

}  // namespace ddprun::launcher
