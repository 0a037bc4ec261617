// LapseReporter: the report of a lost node, where the store does not write it itself.
//
// ddprun's store writes a lapsed hold's notice into the round's stop key (HoldLapse::
// kStoreNotifies). A store that only deletes the held key (kKeyDeletedOnly: etcd expires a lease
// with its keys and writes nothing else) leaves that to the peers: each agent runs one of these,
// which watches the alive keys of the round's other members and, when one is gone, writes that
// member's node_lost notice into the round's stop key create-if-absent (compareSet from ""). The
// first report wins whoever makes it, the notice is the one the store would have written (the
// member's id, group rank and host), and every agent's watch wakes on the stop key as before: the
// rest of Membership cannot tell the two kinds of store apart.
//
// One thread and one store connection of its own. Thread safety: arm() and stop() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stoppable_thread.h"
#include "ddprun/rendezvous/holding_store.h"

namespace ddprun::launcher {

class LapseReporter {
 public:
  // How long one watch lasts before the thread looks for a new round or a stop: the most that
  // arm() or stop() waits for it.
  static constexpr std::chrono::milliseconds kWatchSlice{250};

  struct Watched {
    std::string aliveKey;  // the member's held key
    std::string notice;    // what its loss writes into the stop key (a serialised StopReason)
  };

  explicit LapseReporter(std::unique_ptr<rendezvous::HoldingStore> store);
  ~LapseReporter();  // stop()
  LapseReporter(const LapseReporter&) = delete;
  LapseReporter& operator=(const LapseReporter&) = delete;

  // From now on, reports the first of `members` whose key goes (in the order given: group rank)
  // to `stopKey`, instead of what it watched before. Once it has reported, it waits for the next
  // round's arm(). No members (a one-node round): nothing to watch.
  void arm(std::string stopKey, std::vector<Watched> members);
  // Ends the thread; returns within about kWatchSlice.
  void stop();

 private:
  void run();

  std::unique_ptr<rendezvous::HoldingStore> store_;
  // Under thread_'s lock:
  std::uint64_t generation_ = 0;  // one per arm()
  bool reported_ = false;         // for this generation
  std::string stopKey_;
  std::vector<Watched> members_;
  StoppableThread thread_;
};

}  // namespace ddprun::launcher
