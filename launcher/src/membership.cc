#include "membership.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::launcher {

using nlohmann::json;
using rendezvous::StoreTimeoutError;
using rendezvous::TcpStore;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// The one key every agent of the active run holds: a store serves one run at a time.
constexpr const char* kActiveRunKey = "ddprun/active_run";
// How often joiners re-check whether their round can close while they wait for it.
constexpr auto kJoinPollInterval = 50ms;

std::chrono::milliseconds seconds(const LaunchConfig& config, const char* key,
                                  std::chrono::milliseconds fallback) {
  auto it = config.rdzvConf.find(key);
  if (it == config.rdzvConf.end()) return fallback;
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::stod(it->second) * 1000));
}

json parse(const std::string& text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? json::object() : value;
}

}  // namespace

json toJson(const NodeInfo& node) {
  return {{"id", node.id},         {"address", node.address}, {"hostname", node.hostname},
          {"nproc", node.nproc},   {"pid", node.pid},         {"static_rank", node.staticRank}};
}

NodeInfo nodeFromJson(const json& value) {
  NodeInfo node;
  node.id = value.value("id", std::int64_t{-1});
  node.address = value.value("address", std::string());
  node.hostname = value.value("hostname", std::string());
  node.nproc = value.value("nproc", 1);
  node.pid = value.value("pid", 0L);
  node.staticRank = value.value("static_rank", -1);
  return node;
}

MembershipSettings MembershipSettings::from(const LaunchConfig& config) {
  MembershipSettings s;
  s.joinTimeout = seconds(config, "join_timeout", s.joinTimeout);
  s.lastCallTimeout = seconds(config, "last_call_timeout", s.lastCallTimeout);
  s.keepAliveInterval = seconds(config, "keep_alive_interval", s.keepAliveInterval);
  if (auto it = config.rdzvConf.find("keep_alive_max_attempt"); it != config.rdzvConf.end()) {
    s.keepAliveMaxAttempts = std::max(1, std::stoi(it->second));
  }
  s.storeTimeout = seconds(config, "read_timeout", s.storeTimeout);
  s.heartbeatTimeout = seconds(config, "heartbeat_timeout", s.heartbeatTimeout);
  s.closeTimeout = seconds(config, "close_timeout", s.closeTimeout);
  // torchrun's static rendezvous waits `timeout` (its TCPStore timeout) for the nodes to come.
  if (config.rdzvBackend == RdzvBackend::kStatic && !config.rdzvConf.count("join_timeout")) {
    s.joinTimeout = seconds(config, "timeout", s.joinTimeout);
  }
  return s;
}

Membership::Membership(const LaunchConfig& config, rendezvous::TcpStoreOptions store,
                       NodeInfo self, WorkerStoreHost hostWorkerStore, StoreLost onStoreLost)
    : config_(config),
      settings_(MembershipSettings::from(config)),
      storeOptions_(std::move(store)),
      self_(std::move(self)),
      hostWorkerStore_(std::move(hostWorkerStore)),
      onStoreLost_(std::move(onStoreLost)),
      prefix_(fmt::format("ddprun/{}/", config.rdzvId)) {}

Membership::~Membership() { close(/*hostsStore=*/false); }

std::string Membership::key(const std::string& suffix) const { return prefix_ + suffix; }

std::string Membership::roundKey(int round, const std::string& suffix) const {
  return fmt::format("{}round/{}/{}", prefix_, round, suffix);
}

void Membership::open() {
  // The first connection waits up to read_timeout for the store to come up (the node hosting it
  // may start a little later, as with torchrun); the others follow at once. Tried in one-second
  // attempts so that cancel() is noticed.
  rendezvous::TcpStoreOptions first = storeOptions_;
  first.connectTimeout = std::chrono::seconds(1);
  first.timeout = settings_.storeTimeout;
  const auto start = Clock::now();
  for (;;) {
    try {
      control_ = std::make_unique<TcpStore>(first);
      break;
    } catch (const rendezvous::StoreConnectionError& error) {
      if (cancelled_) throw MembershipCancelled();
      const std::string text = error.what();
      // Something answered but is not a ddprun store: no point in waiting for it.
      if (text.find("handshake") != std::string::npos) {
        throw EndpointError(fmt::format(
            "{}: what listens at the rendezvous endpoint is not a ddprun or TCPStore rendezvous "
            "store; check --rdzv-endpoint",
            text));
      }
      if (Clock::now() - start > settings_.storeTimeout) {
        throw EndpointError(fmt::format(
            "cannot reach the rendezvous store at {}:{} within read_timeout ({} s): {}; start the "
            "agent that hosts it (or ddprun-rendezvous) first, or check --rdzv-endpoint",
            storeOptions_.host, storeOptions_.port, settings_.storeTimeout.count() / 1000, text));
      }
    }
  }
  // The watch and heartbeat connections must notice a silent store quickly (a cut network
  // sends nothing): their calls time out as fast as a hold lapses, or after heartbeat_timeout.
  rendezvous::TcpStoreOptions options = storeOptions_;
  options.timeout = settings_.heartbeatTimeout.count() > 0
                        ? settings_.heartbeatTimeout
                        : std::max(settings_.holdTimeToLive(), std::chrono::milliseconds(1000));
  watch_ = std::make_unique<TcpStore>(options);
  heartbeatStore_ = std::make_unique<TcpStore>(options);

  const std::string active = heartbeatStore_->hold(kActiveRunKey, config_.rdzvId, 0ms, "", "");
  if (active != config_.rdzvId) {
    throw MembershipError(fmt::format(
        "the rendezvous store at {}:{} belongs to run '{}', and this agent's run is '{}': agents "
        "of different jobs never share a rendezvous; give this job its own --rdzv-endpoint, or "
        "the same --rdzv-id as the running job to join it",
        storeOptions_.host, storeOptions_.port, active, config_.rdzvId));
  }
  self_.id = control().add(key("next_node_id"), 1);
  const std::string me = toJson(self_).dump();
  control().set(key(fmt::format("node/{}", self_.id)), me);
  heartbeatStore_->hold(key(fmt::format("alive/{}", self_.id)), me, settings_.holdTimeToLive(), "", "");
  heartbeatRound_ = -1;
  heartbeatThread_ = std::thread([this] { heartbeat(); });
}

void Membership::heartbeat() {
  const std::string aliveKey = key(fmt::format("alive/{}", self_.id));
  const std::string me = toJson(self_).dump();
  const std::string lost = json{{"kind", stop_kind::kNodeLost},
                                {"node", self_.id},
                                {"host", self_.hostname},
                                {"address", self_.address}}
                               .dump();
  std::unique_lock lock(heartbeatMutex_);
  int reportedRound = -1;
  for (;;) {
    // Renew early when the round changes, so a lapse is reported to the round being run.
    heartbeatWake_.wait_for(lock, settings_.keepAliveInterval,
                            [&] { return heartbeatStop_ || heartbeatRound_ != reportedRound; });
    if (heartbeatStop_) return;
    reportedRound = heartbeatRound_;
    const std::string notify = reportedRound >= 0 ? roundKey(reportedRound, "stop") : std::string();
    lock.unlock();
    try {
      heartbeatStore_->hold(aliveKey, me, settings_.holdTimeToLive(), notify, lost);
    } catch (const std::exception& error) {
      {
        std::lock_guard guard(lostMutex_);
        storeLostReason_ = error.what();
      }
      storeLost_.store(true);
      if (onStoreLost_ && !cancelled_) onStoreLost_(error.what());
      return;
    }
    lock.lock();
  }
}

std::string Membership::storeLostReason() const {
  std::lock_guard guard(lostMutex_);
  return storeLostReason_;
}

int Membership::currentRound() {
  // The first agent of the run creates the counter at round 0.
  const std::string value = control().compareSet(key("current_round"), "", "0");
  return std::stoi(value);
}

bool Membership::roundClosed(int round, json* record) {
  const std::string closedKey = roundKey(round, "closed");
  if (!control().check({closedKey})) return false;
  if (record) *record = parse(control().get(closedKey));
  return true;
}

std::optional<int> Membership::previousMembersStillAway(int round, int joined) {
  if (round == 0) return std::nullopt;
  json previous;
  if (!roundClosed(round - 1, &previous)) return std::nullopt;
  const int members = previous.value("members", 0);
  std::vector<std::string> before;
  std::vector<std::string> now;
  for (int k = 1; k <= members; ++k) before.push_back(roundKey(round - 1, fmt::format("member/{}", k)));
  for (int k = 1; k <= joined; ++k) now.push_back(roundKey(round, fmt::format("member/{}", k)));
  if (!control().check(now)) return std::nullopt;  // a joiner has counted itself, not written its id
  std::vector<std::string> previousIds = control().multiGet(before);
  std::vector<std::string> joinedIds = control().multiGet(now);
  int away = 0;
  for (const std::string& id : previousIds) {
    if (std::find(joinedIds.begin(), joinedIds.end(), id) != joinedIds.end()) continue;
    // Not back yet: only worth waiting for if it is still alive.
    if (control().check({key("alive/" + id)})) ++away;
  }
  return away;
}

bool Membership::maybeClose(int round, Clock::time_point& lastCallStart) {
  const int joined = static_cast<int>(control().add(roundKey(round, "joined"), 0));
  bool complete = joined >= config_.maxNodes;
  if (!complete && joined >= config_.minNodes) {
    if (previousMembersStillAway(round, joined) == 0) {
      complete = true;
    } else {
      if (lastCallStart == Clock::time_point{}) lastCallStart = Clock::now();
      complete = Clock::now() - lastCallStart >= settings_.lastCallTimeout;
    }
  } else if (joined < config_.minNodes) {
    lastCallStart = {};
  }
  if (!complete) return false;
  int restarts = 0;
  if (round > 0) {
    json previous;
    if (roundClosed(round - 1, &previous)) {
      restarts = previous.value("restarts", 0);
      const std::string stopKey = roundKey(round - 1, "stop");
      if (control().check({stopKey}) &&
          parse(control().get(stopKey)).value("kind", std::string()) == stop_kind::kFailure) {
        ++restarts;
      }
    }
  }
  const json record{{"members", std::min(joined, config_.maxNodes)}, {"restarts", restarts}};
  control().compareSet(roundKey(round, "closed"), "", record.dump());
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

std::optional<Round> Membership::waitForClose(int round, int slot, Clock::time_point deadline) {
  Clock::time_point lastCallStart{};
  Clock::time_point shortSince{};  // since when the known nodes are fewer than MIN
  int reportedJoined = -1;
  json record;
  while (!roundClosed(round, &record)) {
    if (cancelled_) throw MembershipCancelled();
    if (maybeClose(round, lastCallStart)) continue;
    const int joined = static_cast<int>(control().add(roundKey(round, "joined"), 0));
    // After losses, the nodes that can still come back may be fewer than MIN: then only new
    // nodes can save the job, and they get last_call_timeout, not the whole join_timeout.
    const auto away = joined < config_.minNodes ? previousMembersStillAway(round, joined) : std::nullopt;
    if (away && joined + *away < config_.minNodes) {
      if (shortSince == Clock::time_point{}) {
        shortSince = Clock::now();
        spdlog::warn("only {} node(s) remain of the at least {} this job needs; waiting up to {} s "
                     "(last_call_timeout) for others to join",
                     joined + *away, config_.minNodes, settings_.lastCallTimeout.count() / 1000.0);
      } else if (Clock::now() - shortSince >= settings_.lastCallTimeout) {
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
    if (Clock::now() > deadline) {
      throw MembershipError(fmt::format(
          "rendezvous round {} did not complete within join_timeout ({} s): {} of at least {} "
          "nodes joined; start the missing nodes or lower --nnodes",
          round, settings_.joinTimeout.count() / 1000, joined, config_.minNodes));
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
  if (slot > record.value("members", 0)) return std::nullopt;
  return readRound(round, record);
}

void Membership::waitForRoundToStop(int round, Clock::time_point deadline) {
  spdlog::info("the job already has {} nodes (the maximum); waiting for a place", config_.maxNodes);
  const std::string stopKey = roundKey(round, "stop");
  while (!control().check({stopKey})) {
    if (cancelled_) throw MembershipCancelled();
    if (Clock::now() > deadline) {
      throw MembershipError(fmt::format(
          "no place in the job within join_timeout: it keeps its maximum of {} nodes",
          config_.maxNodes));
    }
    try {
      control().wait({stopKey}, 1s);
    } catch (const StoreTimeoutError&) {
    }
  }
}

Round Membership::join(int fromRound) {
  const auto deadline = Clock::now() + settings_.joinTimeout;
  int round = fromRound < 0 ? currentRound() : fromRound;
  for (;;) {
    json record;
    if (!roundClosed(round, &record)) {
      const int slot = takeSlot(round);
      if (auto joined = waitForClose(round, slot, deadline)) return *joined;
      continue;  // closed without us: we are a newcomer to the running round now
    }
    // The job runs round `round` without us. At MAX nodes: wait for a place. Below: take a place
    // in the next round first, then tell the members to re-form with us.
    if (record.value("members", 0) >= config_.maxNodes) {
      waitForRoundToStop(round, deadline);
      ++round;
      continue;
    }
    const int slot = takeSlot(round + 1);
    announce(round, json{{"kind", stop_kind::kNodeJoined}, {"node", self_.id},
                         {"host", self_.hostname}});
    ++round;
    if (auto joined = waitForClose(round, slot, deadline)) return *joined;
  }
}

Round Membership::readRound(int number, const json& record) {
  Round round;
  round.number = number;
  round.restartCount = record.value("restarts", 0);
  const int members = record.value("members", 0);
  std::vector<std::string> slotKeys;
  for (int k = 1; k <= members; ++k) slotKeys.push_back(roundKey(number, fmt::format("member/{}", k)));
  std::vector<std::string> nodeKeys;
  for (const std::string& id : control().multiGet(slotKeys)) nodeKeys.push_back(key("node/" + id));
  for (const std::string& text : control().multiGet(nodeKeys)) {
    round.members.push_back(nodeFromJson(parse(text)));
  }
  if (config_.rdzvBackend == RdzvBackend::kStatic) {
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
  round.worldSize = 0;
  round.baseRank = 0;
  for (int i = 0; i < members; ++i) {
    if (i < round.groupRank) round.baseRank += round.members[i].nproc;
    round.worldSize += round.members[i].nproc;
  }

  const std::string masterKey = roundKey(number, "master");
  if (round.groupRank == 0) {
    std::string master;
    if (config_.rdzvBackend == RdzvBackend::kStatic) {
      // The workers share this store, on the port the user gave: remove the previous round's
      // worker keys first (every worker of that round is dead: all agents have rejoined).
      rendezvous::TcpStoreOptions raw = storeOptions_;
      raw.keyPrefix = "";
      TcpStore rawStore(raw);
      for (const std::string& k : rawStore.listKeys()) {
        if (!k.starts_with("/ddprun/")) rawStore.deleteKey(k);
      }
      // The store itself, where it really listens (--master-port 0: a free port).
      master = fmt::format("{}:{}", storeOptions_.host, storeOptions_.port);
    } else {
      master = fmt::format("{}:{}", self_.address, hostWorkerStore_(self_.address));
    }
    // Forget rounds nobody will read again.
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
  }
  heartbeatWake_.notify_all();
  return round;
}

json Membership::announce(int round, const json& stop) {
  const std::string text = stop.dump();
  const std::string held = control().compareSet(roundKey(round, "stop"), "", text);
  return held == text ? stop : parse(held);
}

void Membership::markDone(int round, int members) {
  if (control().add(roundKey(round, "done"), 1) >= members) {
    announce(round, json{{"kind", stop_kind::kDone}});
  }
}

json Membership::waitForStop(int round) {
  const std::string stopKey = roundKey(round, "stop");
  for (;;) {
    try {
      // In slices: a store that went silent (network cut) is the heartbeat's to report, and the
      // slices keep this thread from blocking past the agent's life. A stop wakes it at once.
      watch_->wait({stopKey}, 250ms);
      return parse(watch_->get(stopKey));
    } catch (const StoreTimeoutError&) {
      if (cancelled_) throw MembershipCancelled();
      if (storeLost()) throw rendezvous::StoreConnectionError(storeLostReason());
    }
  }
}

int Membership::nextRestartCount(const Round& round, const json& stop) {
  return round.restartCount + (stop.value("kind", std::string()) == stop_kind::kFailure ? 1 : 0);
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
      const auto deadline = Clock::now() + settings_.closeTimeout;
      const std::string alive = prefix_ + "alive/";
      while (Clock::now() < deadline) {
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
