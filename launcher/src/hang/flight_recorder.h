// PyTorch's Flight Recorder, asked for its dump before a hung worker is killed.
//
// What torch does (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, struct DumpPipe, and
// ProcessGroupNCCL.cpp, the heartbeat monitor's loop; torch 2.2 and later, read in its source):
//   - The recorder is on when TORCH_NCCL_TRACE_BUFFER_SIZE > 0 (newer releases read
//     TORCH_FR_BUFFER_SIZE first, then the old name: FlightRecorder.hpp).
//   - When TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set too, the process group with uid 0 (the default
//     group) unlinks and then mkfifo()s "<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><global rank>.pipe"
//     (mode 0666 less the umask) and opens it O_RDONLY|O_NONBLOCK: the worker makes the FIFO and
//     is its only reader. Its heartbeat monitor thread reads it at every poll (every
//     TORCH_NCCL_COORD_CHECK_MILSEC, 1000 ms by default, when TORCH_NCCL_DUMP_ON_TIMEOUT is on,
//     which is the default of recent releases; otherwise only every heartbeat timeout); any read
//     of one byte or more starts a dump, asynchronously, and training goes on.
//   - The dump goes to "<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><global rank>" (newer releases read
//     TORCH_FR_DUMP_TEMP_FILE first; the default prefix is /tmp/nccl_trace_rank_, or
//     ~/.cache/torch/nccl_trace_rank_ in newer ones), written by an std::ofstream (created or
//     truncated, then written): a pickle of the recorder's entries.
//
// What the agent does: when a worker's environment turns the recorder on, the pipe's prefix
// points into the agent's private directory (unless the user set one: then theirs is used) and
// the dump's prefix into the attempt's directory (unless the user set one); before a hung worker
// is killed, one byte is written into its pipe and the dump is waited for, within the evidence's
// budget (hang_evidence.h), beside the stack collection.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// One worker's pipe and the file its dump goes to.
struct FlightRecorderTarget {
  std::string pipe;  // "<pipe prefix><rank>.pipe"
  std::string dump;  // "<dump prefix><rank>"
};

// What a worker is started with: the variables to set, and where its pipe and dump are.
struct FlightRecorderPlan {
  std::map<std::string, std::string> set;  // added to its environment (never one the user set)
  FlightRecorderTarget target;
};

// Whether `environment` turns the recorder on: the buffer size torch reads (TORCH_FR_BUFFER_SIZE
// when set, else TORCH_NCCL_TRACE_BUFFER_SIZE) is an integer above 0.
bool flightRecorderEnabled(const std::map<std::string, std::string>& environment);

// The plan for the worker of global rank `rank` whose environment is `environment`, or nothing
// when the recorder is off there (or a prefix is needed and the agent's is ""). `pipePrefix` and
// `dumpPrefix` are the agent's, used only where the user set no prefix of their own ("" counts as
// unset, as torch takes it).
std::optional<FlightRecorderPlan> flightRecorderPlan(
    const std::map<std::string, std::string>& environment, int rank, const std::string& pipePrefix,
    const std::string& dumpPrefix);

// What came of asking for a dump.
struct FlightRecorderDump {
  std::string pipe;
  bool written = false;            // the byte went into the pipe (a reader had it open)
  std::string file;                // the dump file, once it appeared ("" = none)
  bool settled = false;            // the file stopped growing before the deadline
  std::vector<std::string> notes;  // what went wrong, or was cut short (one line each)
};

// Writes one byte into `target.pipe` when it is a FIFO owned by `pid`'s user and read by someone,
// then waits until `target.dump` is new (made, or changed since before the write) and has not
// grown for a while, or until `budget` has passed. Blocking; never throws.
FlightRecorderDump triggerFlightRecorder(const FlightRecorderTarget& target, pid_t pid,
                                         std::chrono::milliseconds budget);

// The summary's line(s) for `dump`.
std::vector<std::string> flightRecorderSummary(const FlightRecorderDump& dump);

}  // namespace ddprun::launcher
