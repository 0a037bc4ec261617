// Membership: how the agents of one job agree, round after round, on who is in the job.
//
// Everything lives in the rendezvous store under "ddprun/<run id>/" (docs/architecture.md has
// the key layout). A round:
//
//   join    every agent adds itself to round r (a counter and a member slot);
//   close   the first agent that sees the round complete writes its size: complete means MAX
//           nodes, or at least MIN nodes and either every still-alive member of round r-1 has
//           rejoined (a restart or a node loss: no waiting) or last_call_timeout has passed since
//           MIN was reached (new nodes may still come, as in torchrun);
//   run     group rank 0 hosts the round's worker store (MASTER_ADDR:MASTER_PORT); everyone
//           starts its workers and blocks on the round's stop key;
//   stop    the first agent with news writes the stop key: a worker failure, a node lost (written
//           by the store itself when a node's alive hold lapses or its connection drops: nobody
//           polls), a node joining below MAX, a node leaving, or "done" from the last agent
//           through the exit barrier. Everyone wakes at once and moves on.
//
// Restart accounting is job-global: the restart count of round r+1 is round r's plus one when r
// stopped for a failure, written into round r+1's close record, the same for every node.
//
// Thread safety: join/announce/markDone/... run on the agent's control thread, waitForStop on
// its watch thread, the heartbeat on its own thread; each has its own store connection.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::launcher {

// One agent as the others see it.
struct NodeInfo {
  std::int64_t id = -1;      // unique for the run, assigned at open()
  std::string address;       // where this node's services are reached (MASTER_ADDR if rank 0)
  std::string hostname;
  int nproc = 1;
  long pid = 0;
  int staticRank = -1;       // --node-rank with the static backend, else -1
};
nlohmann::json toJson(const NodeInfo& node);
NodeInfo nodeFromJson(const nlohmann::json& json);

// The outcome of a rendezvous round: who is in, and where the workers meet.
struct Round {
  int number = 0;
  std::vector<NodeInfo> members;  // in group-rank order
  int groupRank = 0;              // this node's
  int restartCount = 0;
  int worldSize = 0;
  int baseRank = 0;               // the global rank of this node's local rank 0
  std::string masterAddr;
  std::uint16_t masterPort = 0;
};

// Why a round stopped: the JSON in its stop key.
namespace stop_kind {
inline constexpr const char* kFailure = "failure";        // a worker failed; "failure": details
inline constexpr const char* kNodeLost = "node_lost";     // written by the store (hold lapsed)
inline constexpr const char* kNodeJoined = "node_joined"; // a new node below MAX
inline constexpr const char* kNodeLeft = "node_left";     // an agent stopped by a signal
inline constexpr const char* kDone = "done";              // every node's workers succeeded
}  // namespace stop_kind

// Joining failed for good: the message says why (timeout, too few nodes, closed job).
class MembershipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The rendezvous endpoint never answered within read_timeout, or something that is not a ddprun
// store answers there: the endpoint given is wrong or its host is not up (bad input, exit 2).
class EndpointError : public MembershipError {
 public:
  using MembershipError::MembershipError;
};

// A blocking call gave up because cancel() was called (the agent is shutting down).
class MembershipCancelled : public std::runtime_error {
 public:
  MembershipCancelled() : std::runtime_error("cancelled") {}
};

// --rdzv-conf, with torchrun's names. Differences from torchrun: keep-alives every second (not
// 5), and the static backend's `timeout` is its join timeout.
struct MembershipSettings {
  std::chrono::milliseconds joinTimeout{600000};     // join_timeout: a round must form in this
  std::chrono::milliseconds lastCallTimeout{30000};  // last_call_timeout: wait for more nodes
  std::chrono::milliseconds keepAliveInterval{1000};  // keep_alive_interval
  int keepAliveMaxAttempts = 3;                       // keep_alive_max_attempt
  std::chrono::milliseconds storeTimeout{60000};     // read_timeout: reaching the store, any call
  std::chrono::milliseconds heartbeatTimeout{0};     // heartbeat_timeout (0: the hold's lifetime)
  std::chrono::milliseconds closeTimeout{10000};     // close_timeout: the host waits for the others
  static MembershipSettings from(const LaunchConfig& config);
  std::chrono::milliseconds holdTimeToLive() const { return keepAliveInterval * keepAliveMaxAttempts; }
};

class Membership {
 public:
  // Starts the round's worker store when this node is group rank 0 (c10d): returns its port.
  using WorkerStoreHost = std::function<std::uint16_t(const std::string& address)>;

  // Called once, from the heartbeat thread, when the store stops answering (network cut, host
  // gone): the agent must not wait for its blocked calls to find out.
  using StoreLost = std::function<void(const std::string& reason)>;

  Membership(const LaunchConfig& config, rendezvous::TcpStoreOptions store, NodeInfo self,
             WorkerStoreHost hostWorkerStore, StoreLost onStoreLost);
  ~Membership();

  // Connects, checks that the store's active run is ours (a different run id is refused, never
  // merged), gets a node id, publishes this node and starts holding its alive key.
  // Throws MembershipError (refused run) or rendezvous::StoreError.
  void open();
  const NodeInfo& self() const { return self_; }

  // Joins the first round this node can take part in, from `round` on (-1: whatever round the
  // job is in now), and blocks until it closes. Throws MembershipError: join_timeout passed, or
  // fewer than MIN nodes are left after losses and none came within last_call_timeout.
  Round join(int round);

  // Writes `stop` into round `round`'s stop key unless something is there already; returns
  // the stop that holds (ours or the earlier one).
  nlohmann::json announce(int round, const nlohmann::json& stop);
  // Exit barrier: counts this node done in `round`; the last of `members` announces "done".
  void markDone(int round, int members);
  // Blocks until round `round` stops and returns why (watch thread). Throws StoreError if the
  // store is lost.
  nlohmann::json waitForStop(int round);
  // The restart count the round after `round` will have, given how `round` stopped.
  static int nextRestartCount(const Round& round, const nlohmann::json& stop);

  // Makes every blocking call of this object (connecting, waiting for a round, waiting for a
  // stop) give up soon with MembershipCancelled. Any thread.
  void cancel() { cancelled_.store(true); }

  // Set by the heartbeat thread when the store stops answering it.
  bool storeLost() const { return storeLost_.load(); }
  std::string storeLostReason() const;

  // Stops heartbeats and gives up the holds quietly (a clean exit is not a lost node). When this
  // agent hosts the rendezvous store (`hostsStore`), waits up to close_timeout for the other
  // agents to leave.
  void close(bool hostsStore);

 private:
  std::string key(const std::string& suffix) const;
  std::string roundKey(int round, const std::string& suffix) const;
  rendezvous::TcpStore& control() { return *control_; }
  int currentRound();
  // Counts this node into `round`; returns its slot (1-based join order).
  int takeSlot(int round);
  // Blocks until `round` closes: the round if this node (at `slot`) is in it, else nothing.
  std::optional<Round> waitForClose(int round, int slot, std::chrono::steady_clock::time_point deadline);
  void waitForRoundToStop(int round, std::chrono::steady_clock::time_point deadline);
  bool roundClosed(int round, nlohmann::json* record);
  // Tries to close `round`; true once it is closed (by anyone).
  bool maybeClose(int round, std::chrono::steady_clock::time_point& lastCallStart);
  // The members of round-1 that have not joined `round` yet but are still alive; nothing when
  // round-1 is not known (round 0).
  std::optional<int> previousMembersStillAway(int round, int joined);
  Round readRound(int round, const nlohmann::json& record);
  void heartbeat();

  LaunchConfig config_;
  MembershipSettings settings_;
  rendezvous::TcpStoreOptions storeOptions_;
  NodeInfo self_;
  WorkerStoreHost hostWorkerStore_;
  StoreLost onStoreLost_;
  std::string prefix_;  // "ddprun/<run id>/"
  std::unique_ptr<rendezvous::TcpStore> control_;
  std::unique_ptr<rendezvous::TcpStore> watch_;
  std::unique_ptr<rendezvous::TcpStore> heartbeatStore_;

  std::thread heartbeatThread_;
  std::mutex heartbeatMutex_;
  std::condition_variable heartbeatWake_;
  bool heartbeatStop_ = false;
  int heartbeatRound_ = 0;  // whose stop key a lapse of our hold reports to
  std::atomic<bool> storeLost_{false};
  std::atomic<bool> cancelled_{false};
  mutable std::mutex lostMutex_;
  std::string storeLostReason_;
};

}  // namespace ddprun::launcher
