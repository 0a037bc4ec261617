#include "membership/solo_rendezvous.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace ddprun::launcher {

SoloRendezvous::SoloRendezvous(NodeInfo self, EventLoop& loop, std::string storeAddress)
    : self_(std::move(self)), loop_(loop), storeAddress_(std::move(storeAddress)) {
  self_.id = kNodeId;
}

void SoloRendezvous::join(int round) {
  // Rounds only move forward, as the store's round counter does: the first is 0, a restart's the
  // one after the round that stopped.
  const int number = std::max(round, current_ + 1);
  if (current_ >= 0 && stop_) history_ = historyAfter(history_, *stop_);
  current_ = number;
  stop_.reset();
  done_ = 0;
  watched_ = false;
  stopDelivered_ = false;

  Round formed;
  formed.number = number;
  formed.nodes = 1;
  formed.address = self_.address;
  formed.groupRank = 0;
  formed.history = history_;
  formed.worldSize = self_.nproc;
  formed.baseRank = 0;
  formed.hostsWorkerStore = true;  // a fresh workers' store per round, as a c10d round's rank 0
  spdlog::debug("rendezvous round {}: this node alone (a standalone job: formed without the store)",
                number);
  loop_.post([this, formed = std::move(formed)]() mutable {
    formed_ = formed.number;
    events_->onRoundFormed(std::move(formed));
  });
}

void SoloRendezvous::publishWorkerStore(int, std::string, std::uint16_t) {
  // No other member waits for it: the machine has the round's store already.
}

void SoloRendezvous::announce(int round, StopReason stop) {
  // The first stop of the round holds; a round the job has left takes none (the fencing token).
  if (round != current_ || stop_) return;
  // Through the stop record's text and back, as the store would hand it to the watch: the
  // failure report then reads exactly what it read from the store (the host as valid UTF-8, the
  // failure as its JSON keeps it).
  stop_ = StopReason::parse(stop.serialize()).value_or(std::move(stop));
  deliverStop();
}

void SoloRendezvous::markDone(int round, int members) {
  if (round != current_) return;
  if (++done_ >= members) announce(round, StopReason::done());
}

void SoloRendezvous::watch(int round) {
  if (round != current_) return;
  watched_ = true;
  deliverStop();
}

void SoloRendezvous::deliverStop() {
  if (!watched_ || !stop_ || stopDelivered_) return;
  stopDelivered_ = true;
  loop_.post([this, round = current_, stop = *stop_]() mutable {
    events_->onStop(round, std::move(stop));
  });
}

}  // namespace ddprun::launcher
