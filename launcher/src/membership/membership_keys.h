// The rendezvous store's key layout, written once: every key the agents of one job read and
// write (docs/architecture.md, "Rendezvous rounds", has the table). This is the wire format
// between agents of the same version, so a key's text never changes without a version bump.
//
//   ddprun/active_run                    held by every agent of the running job (one-job stores)
//   ddprun/<run id>/next_node_id         node id counter
//   ddprun/<run id>/node/<id>            a node's record (toJsonText in membership.h)
//   ddprun/<run id>/alive/<id>           held by the node's heartbeat connection
//   ddprun/<run id>/current_round        the round the job is in
//   ddprun/<run id>/round/<r>/joined     join counter; member/<k>: the k-th joiner's node id
//   ddprun/<run id>/round/<r>/closed     the close record; master, stop, done: the round's others
//   ddprun/<run id>/round/<r>/seat/<c>/<id>  node <id>'s seat in the round closed by node <c>: its
//                                        ranks and what it needs of the others (O(1) per member)
//   ddprun/<run id>/round/<r>/world/<c>  the members' node records in group-rank order, written
//                                        once by the closer <c>, read only where the list is needed
//   ddprun/<run id>/status/<id>          the node's AgentSnapshot (`ddprun status` reads them)
//   ddprun/<run id>/round/<r>/finished/<id>  node <id> passed the exit barrier's count (who is
//                                        still at work, for the waiting line)
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stores/store_keys.h"

namespace ddprun::launcher {

// The one key outside every run's prefix: held by each agent of the running job, so that a store
// that is one job's (StoreTenancy::kOneJob, ddprun's own) serves one run at a time: an agent of
// another run id is refused. Never written on a store that jobs share (an etcd), where a run id is
// a job of its own and nothing of one is visible to another.
inline constexpr std::string_view kActiveRunKey = "ddprun/active_run";

// The keys of one run, all under prefix() = "ddprun/<run id>/". The run id is a name
// (common::isRunId: no '/', so no run's prefix is inside another's), and every prefix below ends
// in '/': a range or a delete of run "P" never reaches run "P-x" or "P.x".
class MembershipKeys {
 public:
  // Throws std::invalid_argument for an id that is not a run id (the command line refuses one
  // before: this is the layout's own guarantee).
  explicit MembershipKeys(std::string_view runId);

  const std::string& prefix() const { return prefix_; }
  std::string nextNodeId() const;
  std::string node(std::int64_t id) const;
  // What every node record starts with (`ddprun status` counts them before a round exists).
  std::string nodePrefix() const;
  std::string alive(std::int64_t id) const;
  // What every alive key starts with: the store's host waits for none to be left at close.
  std::string alivePrefix() const;
  std::string currentRound() const;
  // What every key of round `round` starts with: the round is forgotten by deleting them.
  std::string roundPrefix(int round) const;
  std::string joined(int round) const;
  std::string member(int round, int slot) const;
  // What every member slot of round `round` starts with (`ddprun status` counts the joiners).
  std::string memberPrefix(int round) const;
  std::string closed(int round) const;
  // Written by the node `closer` that closes round `round`, before its close record (which names
  // it): the members' node records in group-rank order, one value (worldToText in membership.h),
  // and node `id`'s seat (seatToText), all a member reads to take its place.
  std::string world(int round, std::int64_t closer) const;
  std::string seat(int round, std::int64_t closer, std::int64_t id) const;
  std::string master(int round) const;
  std::string stop(int round) const;
  std::string done(int round) const;
  // Node `id`'s published AgentSnapshot (core/agent_snapshot.h), and what every such key starts
  // with: `ddprun status` lists them (and, while there is none, counts the round's members and the
  // node records, and reads the current round and its close record).
  std::string status(std::int64_t id) const;
  std::string statusPrefix() const;
  // Set by a node as it counts itself done: the exit barrier's waiting line names the others.
  std::string finished(int round, std::int64_t id) const;
  // What every finished key of round `round` starts with: one listing says who finished.
  std::string finishedPrefix(int round) const;

 private:
  std::string prefix_;
};

}  // namespace ddprun::launcher
