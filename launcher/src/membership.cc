#include "membership.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace ddprun::launcher {

using nlohmann::json;
using rendezvous::StoreTimeoutError;
using namespace std::chrono_literals;

namespace {

// The one key every agent of the active run holds: a store serves one run at a time.
constexpr const char* kActiveRunKey = "ddprun/active_run";
// How often joiners re-check whether their round can close while they wait for it.
constexpr auto kJoinPollInterval = 50ms;
// How long each attempt to reach the store lasts while it may still be coming up, so that
// cancel() is noticed.
constexpr auto kConnectAttempt = 1s;

std::string closedText(int members, int restarts) {
  return json{{"members", members}, {"restarts", restarts}}.dump();
}

}  // namespace

std::string toJsonText(const NodeInfo& node) {
  return json{{"id", node.id},       {"address", node.address}, {"hostname", node.hostname},
              {"nproc", node.nproc}, {"pid", node.pid},         {"static_rank", node.staticRank}}
      .dump();
}

std::optional<NodeInfo> nodeFromJsonText(std::string_view text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  NodeInfo node;
  try {
    node.id = value.value("id", std::int64_t{-1});
    node.address = value.value("address", std::string());
    node.hostname = value.value("hostname", std::string());
    node.nproc = value.value("nproc", 0);
    node.pid = value.value("pid", 0L);
    node.staticRank = value.value("static_rank", -1);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (node.id < 0 || node.nproc <= 0) return std::nullopt;
  return node;
}

Membership::Membership(const RendezvousConfig& config, RendezvousBackend& backend,
                       WorkerStoreHost& workerStores, NodeInfo self, Now now)
    : config_(config),
      backend_(backend),
      workerStores_(workerStores),
      self_(std::move(self)),
      now_(std::move(now)),
      prefix_(fmt::format("ddprun/{}/", config.runId)) {}

Membership::~Membership() { close(/*hostsStore=*/false); }

std::string Membership::key(const std::string& suffix) const { return prefix_ + suffix; }

std::string Membership::roundKey(int round, const std::string& suffix) const {
  return fmt::format("{}round/{}/{}", prefix_, round, suffix);
}

void Membership::throwIfStopped() const {
  if (cancelled_) throw MembershipCancelled();
  if (storeLost_) {
    std::lock_guard guard(lostMutex_);
    throw StoreLostError(storeLostReason_);
  }
}

void Membership::open() {
  // The first connection waits up to read_timeout for the store to come up (the node hosting it
  // may start a little later, as with torchrun); the others follow at once.
  const auto start = now_();
  for (;;) {
    try {
      control_ = backend_.connect(settings_.readTimeout, kConnectAttempt);
      break;
    } catch (const rendezvous::StoreHandshakeError& error) {
      // Something answered but is not a ddprun store: no point in waiting for it.
      throw EndpointError(fmt::format(
          "{}: what listens at the rendezvous endpoint is not a ddprun or TCPStore rendezvous "
          "store; check --rdzv-endpoint",
          error.what()));
    } catch (const rendezvous::StoreConnectionError& error) {
      if (cancelled_) throw MembershipCancelled();
      if (now_() - start > settings_.readTimeout) {
        throw EndpointError(fmt::format(
            "cannot reach the rendezvous store at {} within read_timeout ({} s): {}; start the "
            "agent that hosts it (or ddprun-rendezvous) first, or check --rdzv-endpoint",
            backend_.address(), settings_.readTimeout.count() / 1000.0, error.what()));
      }
    }
  }
  // The watch and heartbeat connections must notice a silent store quickly (a cut network
  // sends nothing): their calls time out as fast as a hold lapses, or after heartbeat_timeout.
  const auto quick = settings_.heartbeatTimeout.value_or(std::max(settings_.holdTimeToLive(), 1000ms));
  watch_ = backend_.connect(quick, settings_.readTimeout);
  heartbeatStore_ = backend_.connect(quick, settings_.readTimeout);

  const std::string active = heartbeatStore_->hold(kActiveRunKey, config_.runId, 0ms, "", "");
  if (active != config_.runId) {
    throw MembershipError(fmt::format(
        "the rendezvous store at {} belongs to run '{}', and this agent's run is '{}': agents "
        "of different jobs never share a rendezvous; give this job its own --rdzv-endpoint, or "
        "the same --rdzv-id as the running job to join it",
        backend_.address(), active, config_.runId));
  }
  self_.id = control().add(key("next_node_id"), 1);
  const std::string me = toJsonText(self_);
  control().set(key(fmt::format("node/{}", self_.id)), me);
  heartbeatStore_->hold(key(fmt::format("alive/{}", self_.id)), me, settings_.holdTimeToLive(), "", "");
  heartbeatThread_ = std::thread([this] { heartbeat(); });
}

void Membership::renewHold(int round, int groupRank) {
  const std::string notify = round >= 0 ? roundKey(round, "stop") : std::string();
  const std::string lost = StopReason::nodeLost(self_.id, groupRank, self_.hostname).serialize();
  heartbeatStore_->hold(key(fmt::format("alive/{}", self_.id)), toJsonText(self_),
                        settings_.holdTimeToLive(), notify, lost);
}

void Membership::heartbeat() {
  std::unique_lock lock(heartbeatMutex_);
  for (;;) {
    heartbeatWake_.wait_for(lock, settings_.keepAliveInterval, [&] { return heartbeatStop_; });
    if (heartbeatStop_) return;
    const int round = heartbeatRound_;
    const int groupRank = heartbeatGroupRank_;
    lock.unlock();
    try {
      renewHold(round, groupRank);
    } catch (const std::exception& error) {
      {
        std::lock_guard guard(lostMutex_);
        storeLostReason_ = error.what();
      }
      storeLost_.store(true);  // every blocked call of ours notices within its next slice
      return;
    }
    lock.lock();
  }
}

int Membership::currentRound() {
  // The first agent of the run creates the counter at round 0.
  return std::stoi(control().compareSet(key("current_round"), "", "0"));
}

std::optional<Membership::Closed> Membership::closed(int round) {
  const std::string closedKey = roundKey(round, "closed");
  if (!control().check({closedKey})) return std::nullopt;
  const json record = json::parse(control().get(closedKey), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    throw MembershipError(fmt::format("round {}'s close record in the store is corrupt", round));
  }
  return Closed{record.value("members", 0), record.value("restarts", 0)};
}

std::optional<StopReason> Membership::stopOf(int round) {
  const std::string stopKey = roundKey(round, "stop");
  if (!control().check({stopKey})) return std::nullopt;
  return StopReason::parse(control().get(stopKey));
}

std::optional<int> Membership::previousMembersStillAway(int round, int joined) {
  if (round == 0) return std::nullopt;
  const auto previous = closed(round - 1);
  if (!previous) return std::nullopt;
  std::vector<std::string> before;
  std::vector<std::string> now;
  for (int k = 1; k <= previous->members; ++k) before.push_back(roundKey(round - 1, fmt::format("member/{}", k)));
  for (int k = 1; k <= joined; ++k) now.push_back(roundKey(round, fmt::format("member/{}", k)));
  if (!control().check(now)) return std::nullopt;  // a joiner has counted itself, not written its id
  const std::vector<std::string> previousIds = control().multiGet(before);
  const std::vector<std::string> joinedIds = control().multiGet(now);
  int away = 0;
  for (const std::string& id : previousIds) {
    if (std::find(joinedIds.begin(), joinedIds.end(), id) != joinedIds.end()) continue;
    // Not back yet: only worth waiting for if it is still alive.
    if (control().check({key("alive/" + id)})) ++away;
  }
  return away;
}

bool Membership::maybeClose(int round, TimePoint& lastCallStart) {
  const int joined = static_cast<int>(control().add(roundKey(round, "joined"), 0));
  bool complete = joined >= config_.maxNodes;
  if (!complete && joined >= config_.minNodes) {
    if (previousMembersStillAway(round, joined) == 0) {
      complete = true;
    } else {
      if (lastCallStart == TimePoint{}) lastCallStart = now_();
      complete = now_() - lastCallStart >= settings_.lastCallTimeout;
    }
  } else if (joined < config_.minNodes) {
    lastCallStart = {};
  }
  if (!complete) return false;
  int restarts = 0;
  if (round > 0) {
    if (const auto previous = closed(round - 1)) {
      const auto stop = stopOf(round - 1);
      restarts = stop ? restartsAfter(previous->restarts, *stop) : previous->restarts;
    }
  }
  control().compareSet(roundKey(round, "closed"), "", closedText(std::min(joined, config_.maxNodes), restarts));
  return true;
}

int Membership::takeSlot(int round) {
  const int slot = static_cast<int>(control().add(roundKey(round, "joined"), 1));
  control().set(roundKey(round, fmt::format("member/{}", slot)), std::to_string(self_.id));
  // Keep the job's current round up to date for agents that start later.
  for (std::string current = std::to_string(round - 1); round > 0;) {
    const std::string seen =
        control().compareSet(key("current_round"), current, std::to_string(round));
    if (std::stoi(seen) >= round) break;
    current = seen;
  }
  return slot;
}

std::optional<Round> Membership::waitForClose(int round, int slot, TimePoint deadline) {
  TimePoint lastCallStart{};
  TimePoint shortSince{};  // since when the known nodes are fewer than MIN
  int reportedJoined = -1;
  std::optional<Closed> record;
  while (!(record = closed(round))) {
    throwIfStopped();
    if (maybeClose(round, lastCallStart)) continue;
    const int joined = static_cast<int>(control().add(roundKey(round, "joined"), 0));
    // After losses, the nodes that can still come back may be fewer than MIN: then only new
    // nodes can save the job, and they get last_call_timeout, not the whole join_timeout.
    const auto away = joined < config_.minNodes ? previousMembersStillAway(round, joined) : std::nullopt;
    if (away && joined + *away < config_.minNodes) {
      if (shortSince == TimePoint{}) {
        shortSince = now_();
        spdlog::warn("only {} node(s) remain of the at least {} this job needs; waiting up to {} s "
                     "(last_call_timeout) for others to join",
                     joined + *away, config_.minNodes, settings_.lastCallTimeout.count() / 1000.0);
      } else if (now_() - shortSince >= settings_.lastCallTimeout) {
        throw MembershipError(fmt::format(
            "only {} node(s) remain of the at least {} this job needs (--nnodes {}:{}): the others "
            "were lost and none joined within last_call_timeout ({} s); restart the lost nodes or "
            "lower the minimum of --nnodes",
            joined + *away, config_.minNodes, config_.minNodes, config_.maxNodes,
            settings_.lastCallTimeout.count() / 1000.0));
      }
    } else {
      shortSince = {};
    }
    if (now_() > deadline) {
      throw MembershipError(fmt::format(
          "rendezvous round {} did not complete within join_timeout ({} s): {} of at least {} "
          "nodes joined; start the missing nodes or lower --nnodes",
          round, settings_.joinTimeout.count() / 1000.0, joined, config_.minNodes));
    }
    if (joined != reportedJoined) {
      spdlog::info("rendezvous round {}: {} node(s) joined, waiting for {}", round, joined,
                   joined < config_.minNodes ? fmt::format("at least {}", config_.minNodes)
                                             : std::string("the round to close"));
      reportedJoined = joined;
    }
    try {
      control().wait({roundKey(round, "closed")}, kJoinPollInterval);
    } catch (const StoreTimeoutError&) {
    }
  }
  // The round may have closed just before our slot (last call ran out as we arrived).
  if (slot > record->members) return std::nullopt;
  return readRound(round, *record);
}

void Membership::waitForRoundToStop(int round, TimePoint deadline) {
  spdlog::info("the job already has {} nodes (the maximum); waiting for a place", config_.maxNodes);
  const std::string stopKey = roundKey(round, "stop");
  while (!control().check({stopKey})) {
    throwIfStopped();
    if (now_() > deadline) {
      throw MembershipError(fmt::format(
          "no place in the job within join_timeout: it keeps its maximum of {} nodes",
          config_.maxNodes));
    }
    try {
      control().wait({stopKey}, kJoinPollInterval * 4);
    } catch (const StoreTimeoutError&) {
    }
  }
}

Round Membership::join(int fromRound) {
  const auto deadline = now_() + settings_.joinTimeout;
  int round = fromRound < 0 ? currentRound() : fromRound;
  for (;;) {
    throwIfStopped();
    const auto record = closed(round);
    if (!record) {
      const int slot = takeSlot(round);
      if (auto joined = waitForClose(round, slot, deadline)) return *joined;
      continue;  // closed without us: we are a newcomer to the running round now
    }
    // The job runs round `round` without us. At MAX nodes: wait for a place. Below: take a place
    // in the next round first, then tell the members to re-form with us.
    if (record->members >= config_.maxNodes) {
      waitForRoundToStop(round, deadline);
      ++round;
      continue;
    }
    const int slot = takeSlot(round + 1);
    announce(round, StopReason::nodeJoined(self_.id, self_.hostname));
    ++round;
    if (auto joined = waitForClose(round, slot, deadline)) return *joined;
  }
}

Round Membership::readRound(int number, const Closed& record) {
  Round round;
  round.number = number;
  round.restartCount = record.restarts;
  const int members = record.members;
  std::vector<std::string> slotKeys;
  for (int k = 1; k <= members; ++k) slotKeys.push_back(roundKey(number, fmt::format("member/{}", k)));
  std::vector<std::string> nodeKeys;
  for (const std::string& id : control().multiGet(slotKeys)) nodeKeys.push_back(key("node/" + id));
  for (const std::string& text : control().multiGet(nodeKeys)) {
    auto node = nodeFromJsonText(text);
    if (!node) {
      throw MembershipError(fmt::format("round {}: a node record in the store is malformed ({}); "
                                        "the store was written by something other than ddprun",
                                        number, text.substr(0, 200)));
    }
    round.members.push_back(std::move(*node));
  }
  if (config_.backend == RdzvBackend::kStatic) {
    std::sort(round.members.begin(), round.members.end(),
              [](const NodeInfo& a, const NodeInfo& b) { return a.staticRank < b.staticRank; });
    for (int i = 0; i < members; ++i) {
      if (round.members[i].staticRank != i) {
        throw MembershipError(fmt::format(
            "node ranks of the {} agents are not 0..{} (got {} at place {}): give every agent a "
            "distinct --node-rank",
            members, members - 1, round.members[i].staticRank, i));
      }
    }
  } else {
    // Deterministic group ranks: by address, then by the order the agents first registered.
    std::sort(round.members.begin(), round.members.end(), [](const NodeInfo& a, const NodeInfo& b) {
      return std::tie(a.address, a.id) < std::tie(b.address, b.id);
    });
  }
  for (int i = 0; i < members; ++i) {
    if (round.members[i].id == self_.id) round.groupRank = i;
  }
  for (int i = 0; i < members; ++i) {
    if (i < round.groupRank) round.baseRank += round.members[i].nproc;
    round.worldSize += round.members[i].nproc;
  }

  const std::string masterKey = roundKey(number, "master");
  if (round.groupRank == 0) {
    std::string master;
    if (config_.backend == RdzvBackend::kStatic) {
      // The workers share this store, on the port the user gave: remove the previous round's
      // worker keys first (every worker of that round is dead: all agents have rejoined).
      backend_.clearWorkerKeys();
      master = backend_.address();  // where it really listens (--master-port 0: a free port)
    } else {
      master = fmt::format("{}:{}", self_.address, workerStores_.host(self_.address));
    }
    // Forget rounds nobody will read again: every agent is in this round, so none reads r-2.
    if (number >= 2) {
      const std::string old = fmt::format("{}round/{}/", prefix_, number - 2);
      for (const std::string& k : control().listKeys()) {
        if (k.starts_with(old)) control().deleteKey(k);
      }
    }
    control().set(masterKey, master);
  }
  const std::string master = control().get(masterKey);
  const auto colon = master.rfind(':');
  round.masterAddr = master.substr(0, colon);
  round.masterPort = static_cast<std::uint16_t>(std::stoi(master.substr(colon + 1)));
  {
    std::lock_guard lock(heartbeatMutex_);
    heartbeatRound_ = number;
    heartbeatGroupRank_ = round.groupRank;
  }
  // From now on a lapse of our hold must stop this round: armed before anyone starts workers,
  // so that a node lost at any moment of the round is reported to it.
  renewHold(number, round.groupRank);
  return round;
}

StopReason Membership::announce(int round, const StopReason& stop) {
  const std::string text = stop.serialize();
  const std::string held = control().compareSet(roundKey(round, "stop"), "", text);
  if (held == text) return stop;
  auto earlier = StopReason::parse(held);
  if (!earlier) throw MembershipError(fmt::format("round {}'s stop record in the store is corrupt", round));
  return *earlier;
}

void Membership::markDone(int round, int members) {
  if (control().add(roundKey(round, "done"), 1) >= members) announce(round, StopReason::done());
}

StopReason Membership::waitForStop(int round) {
  const std::string stopKey = roundKey(round, "stop");
  for (;;) {
    try {
      // In slices: a store that went silent (network cut) is the heartbeat's to report, and the
      // slices keep this thread from blocking past the agent's life. A stop wakes it at once.
      watch_->wait({stopKey}, 250ms);
      const std::string text = watch_->get(stopKey);
      if (auto stop = StopReason::parse(text)) return *stop;
      throw MembershipError(fmt::format("round {}'s stop record in the store is corrupt: {}", round,
                                        text.substr(0, 200)));
    } catch (const StoreTimeoutError&) {
      throwIfStopped();
    }
  }
}

void Membership::close(bool hostsStore) {
  {
    std::lock_guard lock(heartbeatMutex_);
    if (heartbeatStop_ && !heartbeatThread_.joinable()) return;
    heartbeatStop_ = true;
  }
  heartbeatWake_.notify_all();
  if (heartbeatThread_.joinable()) heartbeatThread_.join();
  if (!heartbeatStore_ || storeLost()) return;
  try {
    heartbeatStore_->release(key(fmt::format("alive/{}", self_.id)));
    heartbeatStore_->release(kActiveRunKey);
    if (hostsStore) {
      // This agent hosts the store: the others read the final state from it, so let them leave
      // first (bounded: one that died is gone with its connection anyway).
      const auto deadline = std::chrono::steady_clock::now() + settings_.closeTimeout;
      const std::string alive = prefix_ + "alive/";
      while (std::chrono::steady_clock::now() < deadline) {
        const auto keys = control().listKeys();
        if (std::none_of(keys.begin(), keys.end(),
                         [&](const std::string& k) { return k.starts_with(alive); })) {
          break;
        }
        std::this_thread::sleep_for(5ms);
      }
    }
  } catch (const std::exception& error) {
    spdlog::debug("leaving the rendezvous: {}", error.what());
  }
}

}  // namespace ddprun::launcher
