// StopReason: why a rendezvous round (or this agent) stops. The agents agree on it through the
// round's stop key; this is the one place it is turned into the store's text and back.
//
//   kWorkerFailed  a worker failed: `failure` says which and how (costs a restart)
//   kNodeLost      a node's agent vanished: written by the store itself when its hold lapses
//   kNodeJoined    a new node came while the job runs below its maximum: re-form with it
//   kNodeLeft      an agent was stopped by a signal and leaves the job
//   kDone          every node's workers succeeded (the last node through the exit barrier)
//   kStoreLost     the rendezvous store stopped answering (local only: never written)
//   kSignalled     this agent received a handled signal (local only: never written)
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/worker_failure.h"

namespace ddprun::launcher {

enum class StopKind {
  kWorkerFailed,
  kNodeLost,
  kNodeJoined,
  kNodeLeft,
  kDone,
  kStoreLost,
  kSignalled
};

struct StopReason {
  StopKind kind = StopKind::kDone;
  std::optional<WorkerFailure> failure;  // kWorkerFailed
  std::int64_t node = -1;                // the node it concerns (its id in the rendezvous)
  int groupRank = -1;                    // that node's group rank in the round, when known
  std::string host;                      // that node's host name
  int signal = 0;                        // kNodeLeft, kSignalled: the signal
  bool storeHost = false;                // kNodeLeft: the leaving agent hosts the rendezvous store
  std::string detail;                    // kStoreLost: what the store call said

  static StopReason workerFailed(WorkerFailure failure, std::int64_t node);
  static StopReason nodeLost(std::int64_t node, int groupRank, std::string host);
  static StopReason nodeJoined(std::int64_t node, std::string host);
  static StopReason nodeLeft(std::int64_t node, int groupRank, std::string host, int signal,
                             bool storeHost = false);
  static StopReason done();
  static StopReason storeLost(std::string detail);
  static StopReason signalled(int signal);

  // The form written into a round's stop key (JSON). REQUIRES: not a local-only kind.
  std::string serialize() const;
  // The inverse. A record that is not one of ours (unparsable, unknown kind) is nothing: callers
  // treat it as corrupt rather than guessing.
  static std::optional<StopReason> parse(std::string_view text);

  // Whether the job's re-forming after this stop costs a restart.
  bool costsRestart() const { return kind == StopKind::kWorkerFailed; }
  // "node 1 (host-b)": how messages name the node it concerns (the host escaped: shown()).
  std::string nodeText() const;
};

const char* stopKindName(StopKind kind);

}  // namespace ddprun::launcher
