// StatusPublisher: keeps this agent's AgentSnapshot (core/agent_snapshot.h) in the job's
// rendezvous, at MembershipKeys::status(node id), where `ddprun status` reads every node's. It
// writes over a connection and a thread of its own: store calls block, and neither the event
// loop nor the membership's control thread (joins, stops, restarts) may wait on a status write.
// Coalescing: only the newest snapshot matters, so one waiting to be written is replaced by a
// newer one, and a store that is slow or gone delays nothing but the status.
//
// Thread safety: publish() and publishLast() from any thread; the destructor from the owner's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/agent_snapshot.h"
#include "core/stoppable_thread.h"
#include "membership/membership_keys.h"
#include "stores/store_backend.h"

namespace ddprun::launcher {

// The most a published snapshot may take in the store (and the most `ddprun status` reads of
// one): a node with many workers and a long failure message stays well under it.
inline constexpr std::size_t kMaxSnapshotBytes = 64 * 1024;

// The snapshot's JSON text, within kMaxSnapshotBytes: when too large, the failure's texts are
// shortened first, then workers left out from the end (the count in "nodes" stays true).
std::string boundedSnapshotText(AgentSnapshot snapshot);

class StatusPublisher {
 public:
  // `backend` must outlive the publisher. Each store call gives up after `callTimeout`.
  StatusPublisher(StoreBackend& backend, const std::string& runId,
                  std::chrono::milliseconds callTimeout = std::chrono::seconds(2));
  ~StatusPublisher();

  // Writes `snapshot` as node `nodeId`'s soon; returns at once. A node id that changed (a
  // rejoin: a new member) moves the key: the old one is deleted.
  void publish(const AgentSnapshot& snapshot, std::int64_t nodeId);
  // The final snapshot: written before the agent leaves the rendezvous, waiting up to `patience`
  // for it. Nothing is published after it. Returns whether it was written.
  bool publishLast(const AgentSnapshot& snapshot, std::int64_t nodeId,
                   std::chrono::milliseconds patience);

 private:
  // Starts the writing thread if it has not started. REQUIRES: thread_'s lock held.
  void startThreadLocked();
  void run();
  // One write of `text` as node `nodeId`'s; throws what the store throws.
  void write(std::int64_t nodeId, const std::string& text);

  StoreBackend& backend_;
  const MembershipKeys keys_;
  const std::chrono::milliseconds callTimeout_;
  std::unique_ptr<rendezvous::HoldingStore> store_;  // the thread's own connection
  std::int64_t writtenId_ = -1;                      // the node id last written (the thread's)

  // Under thread_'s lock:
  std::optional<std::pair<std::int64_t, std::string>> pending_;
  std::uint64_t queued_ = 0;   // snapshots handed over
  std::uint64_t settled_ = 0;  // of those, written or given up on
  bool lastWritten_ = false;   // the last one settled was written
  bool last_ = false;          // publishLast() was called: nothing more after it
  StoppableThread thread_;     // started by the first snapshot handed over (under its lock)
};

}  // namespace ddprun::launcher
