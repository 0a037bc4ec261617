#include "membership/membership.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/shown_text.h"
#include "core/wait_lines.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {

using nlohmann::json;
using rendezvous::StoreTimeoutError;
using namespace std::chrono_literals;

namespace {

// How often joiners re-check whether their round can close while they wait for it.
constexpr auto kJoinPollInterval = 50ms;
// Up to this many nodes a forming round's waiting line comes at once when someone joins; a
// bigger job's every kWaitLineInterval (a line naming thousands of hosts at each arrival is a
// flood, and reading who joined costs O(N) for each of N joiners).
constexpr int kNamedJoinersMax = 64;
// How long each attempt to reach the store lasts while it may still be coming up, so that
// cancel() is noticed.
constexpr auto kConnectAttempt = 1s;

}  // namespace

std::string toJsonText(const NodeInfo& node) {
  // A host name is whatever gethostname() gave: bytes that are not UTF-8 must not make dump() throw.
  return json{{"id", node.id},
              {"address", common::validUtf8(node.address)},
              {"hostname", common::validUtf8(node.hostname)},
              {"nproc", node.nproc},
              {"pid", node.pid},
              {"static_rank", node.staticRank}}
      .dump();
}

namespace {

// What a node record may hold, one rule for both of its forms (a node/<id> object, a world entry).
// nproc and the static rank come wide and are range-checked before narrowing: 4294967297 must not
// become nproc 1.
std::optional<NodeInfo> checkedNode(NodeInfo node, std::int64_t nproc, std::int64_t staticRank) {
  if (node.id < 0 || nproc <= 0 || nproc > kMaxNprocPerNode) return std::nullopt;
  if (staticRank < -1 || staticRank > std::numeric_limits<int>::max()) return std::nullopt;
  node.nproc = static_cast<int>(nproc);
  node.staticRank = static_cast<int>(staticRank);
  return node;
}

}  // namespace

std::optional<NodeInfo> nodeFromJsonText(std::string_view text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  NodeInfo node;
  std::int64_t nproc = 0;
  std::int64_t staticRank = -1;
  try {
    node.id = value.value("id", std::int64_t{-1});
    node.address = value.value("address", std::string());
    node.hostname = value.value("hostname", std::string());
    nproc = value.value("nproc", std::int64_t{0});
    node.pid = value.value("pid", 0L);
    staticRank = value.value("static_rank", std::int64_t{-1});
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return checkedNode(std::move(node), nproc, staticRank);
}

namespace {

json worldEntry(const NodeInfo& node) {
  return json::array({node.id, node.nproc, common::validUtf8(node.address), common::validUtf8(node.hostname),
                      node.pid, node.staticRank});
}

std::optional<NodeInfo> nodeFromWorldEntry(const json& entry) {
  if (!entry.is_array() || entry.size() != 6) return std::nullopt;
  NodeInfo node;
  node.id = entry[0].get<std::int64_t>();
  node.address = entry[2].get<std::string>();
  node.hostname = entry[3].get<std::string>();
  node.pid = entry[4].get<long>();
  return checkedNode(std::move(node), entry[1].get<std::int64_t>(), entry[5].get<std::int64_t>());
}

}  // namespace

std::string worldToText(const std::vector<NodeInfo>& members) {
  json world = json::array();
  for (const NodeInfo& node : members) world.push_back(worldEntry(node));
  return world.dump();
}

std::optional<std::vector<NodeInfo>> worldFromText(std::string_view text) {
  const json world = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!world.is_array()) return std::nullopt;
  std::vector<NodeInfo> members;
  members.reserve(world.size());
  try {
    for (const json& entry : world) {
      auto node = nodeFromWorldEntry(entry);
      if (!node) return std::nullopt;
      members.push_back(std::move(*node));
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return members;
}

std::vector<Seat> seatsOf(const std::vector<NodeInfo>& members, std::int64_t closer) {
  const int count = static_cast<int>(members.size());
  int worldSize = 0;
  for (const NodeInfo& node : members) worldSize += node.nproc;
  std::vector<Seat> seats;
  seats.reserve(members.size());
  int baseRank = 0;
  for (int rank = 0; rank < count; ++rank) {
    Seat seat;
    seat.closer = closer;
    seat.nodes = count;
    seat.groupRank = rank;
    seat.baseRank = baseRank;
    seat.worldSize = worldSize;
    seat.self = members[static_cast<std::size_t>(rank)];
    seat.rank0Address = members.front().address;
    for (int step = 1; step <= kSeatNeighbours && step < count; ++step) {
      const int next = (rank + step) % count;
      const NodeInfo& node = members[static_cast<std::size_t>(next)];
      seat.next.push_back({next, node.id, node.hostname});
    }
    baseRank += seat.self.nproc;
    seats.push_back(std::move(seat));
  }
  return seats;
}


std::string seatToText(const Seat& seat) {
  json next = json::array();
  for (const Seat::Neighbour& neighbour : seat.next) {
    next.push_back(json::array({neighbour.groupRank, neighbour.id, common::validUtf8(neighbour.hostname)}));
  }
  return json{{"closer", seat.closer},
              {"nodes", seat.nodes},
              {"group_rank", seat.groupRank},
              {"base_rank", seat.baseRank},
              {"world_size", seat.worldSize},
              {"self", worldEntry(seat.self)},
              {"rank0", common::validUtf8(seat.rank0Address)},
              {"next", std::move(next)}}
      .dump();
}

std::optional<Seat> seatFromText(std::string_view text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  Seat seat;
  try {
    seat.closer = value.at("closer").get<std::int64_t>();
    seat.nodes = value.at("nodes").get<int>();
    seat.groupRank = value.at("group_rank").get<int>();
    seat.baseRank = value.at("base_rank").get<int>();
    seat.worldSize = value.at("world_size").get<int>();
    auto self = nodeFromWorldEntry(value.at("self"));
    if (!self) return std::nullopt;
    seat.self = std::move(*self);
    seat.rank0Address = value.at("rank0").get<std::string>();
    const json& next = value.at("next");
    if (!next.is_array() || next.size() > static_cast<std::size_t>(kSeatNeighbours)) return std::nullopt;
    for (const json& entry : next) {
      if (!entry.is_array() || entry.size() != 3) return std::nullopt;
      seat.next.push_back({entry[0].get<int>(), entry[1].get<std::int64_t>(), entry[2].get<std::string>()});
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return seat;
}

std::optional<std::string> seatProblem(const Seat& seat, int nodes, std::int64_t closer, const NodeInfo& self,
                                       int maxNodes, bool staticRanks) {
  if (seat.closer != closer) {
    return fmt::format("this node's seat was written by node {}, the close record by node {}", seat.closer, closer);
  }
  if (nodes < 1 || nodes > maxNodes) return fmt::format("{} members where the job allows 1 to {}", nodes, maxNodes);
  if (seat.nodes != nodes) return fmt::format("this node's seat counts {} members, the close record {}", seat.nodes, nodes);
  const NodeInfo& mine = seat.self;
  if (mine.id != self.id || mine.address != self.address || mine.nproc != self.nproc || mine.pid != self.pid ||
      mine.staticRank != self.staticRank) {
    return fmt::format("this node's own record (node {}) is not what it wrote", self.id);
  }
  if (seat.groupRank < 0 || seat.groupRank >= nodes) {
    return fmt::format("group rank {} in a round of {} nodes", seat.groupRank, nodes);
  }
  if (staticRanks && seat.groupRank != self.staticRank) {
    return fmt::format("group rank {} for node rank {}", seat.groupRank, self.staticRank);
  }
  // The world cannot be larger than every member at the most workers a node may claim.
  const std::int64_t most = static_cast<std::int64_t>(nodes) * kMaxNprocPerNode;
  if (seat.baseRank < 0 || seat.worldSize > most ||
      static_cast<std::int64_t>(seat.baseRank) + mine.nproc > seat.worldSize) {
    return fmt::format("ranks {}..{} of a world of {}", seat.baseRank, seat.baseRank + mine.nproc - 1, seat.worldSize);
  }
  if (seat.rank0Address.empty()) return std::string("group rank 0 has no address");
  if (seat.groupRank == 0 && seat.rank0Address != mine.address) {
    return fmt::format("group rank 0's address {} is not this node's ({})", shown(seat.rank0Address), shown(mine.address));
  }
  for (const Seat::Neighbour& neighbour : seat.next) {
    if (neighbour.groupRank < 0 || neighbour.groupRank >= nodes || neighbour.groupRank == seat.groupRank ||
        neighbour.id < 0 || neighbour.id == self.id) {
      return fmt::format("a neighbour at group rank {} (node {})", neighbour.groupRank, neighbour.id);
    }
  }
  return std::nullopt;
}

std::optional<std::string> roundMembersProblem(const std::vector<std::int64_t>& ids,
                                               const std::vector<NodeInfo>& members,
                                               const NodeInfo& self, int maxNodes) {
  if (ids.empty() || static_cast<int>(ids.size()) > maxNodes) {
    return fmt::format("{} members where the job allows 1 to {}", ids.size(), maxNodes);
  }
  if (members.size() != ids.size()) return fmt::format("{} node records for {} members", members.size(), ids.size());
  std::set<std::int64_t> seen;
  bool selfIn = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const NodeInfo& node = members[i];
    if (!seen.insert(ids[i]).second) return fmt::format("node {} is a member twice", ids[i]);
    if (node.id != ids[i]) return fmt::format("the record of node {} says it is node {}", ids[i], node.id);
    if (node.nproc <= 0 || node.nproc > kMaxNprocPerNode) {
      return fmt::format("node {} claims {} workers", node.id, node.nproc);
    }
    if (node.address.empty()) return fmt::format("node {} has no address", node.id);
    if (node.id == self.id) {
      selfIn = true;
      if (node.address != self.address || node.nproc != self.nproc || node.pid != self.pid ||
          node.staticRank != self.staticRank) {
        return fmt::format("this node's own record (node {}) is not what it wrote", self.id);
      }
    }
  }
  if (!selfIn) return fmt::format("this node (node {}) is not among the members", self.id);
  return std::nullopt;
}

std::optional<std::string> masterProblem(const std::string& master, const std::string& expectedHost) {
  const auto colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0) return fmt::format("{} is not host:port", quotedValue(master));
  int port = 0;
  const char* begin = master.data() + colon + 1;
  const char* end = master.data() + master.size();
  const auto [stop, error] = std::from_chars(begin, end, port);
  if (error != std::errc() || stop != end || port < 1 || port > 65535) {
    return fmt::format("{} has no port in 1..65535", quotedValue(master));
  }
  if (!expectedHost.empty() && master.substr(0, colon) != expectedHost) {
    return fmt::format("{} is not on group rank 0's address {}", quotedValue(master), shown(expectedHost));
  }
  return std::nullopt;
}

Membership::Membership(const RendezvousConfig& config, StoreBackend& backend,
                       NodeInfo self, Now now)
    : config_(config),
      backend_(backend),
      self_(std::move(self)),
      now_(std::move(now)),
      keys_(config.runId) {
  if (config_.backend == RdzvBackend::kStatic && backend_.staticFacet() == nullptr) {
    throw std::invalid_argument("Membership: the static rendezvous needs a store its workers share");
  }
}

Membership::~Membership() { close(/*hostsStore=*/false); }

void Membership::throwIfStopped() const {
  if (cancelled_) throw MembershipCancelled();
  if (storeLost_) {
    std::lock_guard guard(lostMutex_);
    throw StoreLostError(storeLostReason_, storeClosed_.load());
  }
}

void Membership::open(std::optional<std::chrono::milliseconds> patienceGiven) {
  // The first connection waits for the store to come up (the node hosting it may start later, as
  // with torchrun): up to read_timeout, or with the static backend the whole join timeout (its
  // `timeout`, as torchrun's TCPStore client waits for the master); the others follow at once.
  // A store host name that does not resolve yet (a Kubernetes pod's service name appears up to
  // ~30 s after the pod) is waited for up to the join timeout, and the store behind it then gets
  // its patience again from the moment the name resolved.
  const auto patience = patienceGiven.value_or(
      config_.backend == RdzvBackend::kStatic ? settings_.joinTimeout : settings_.readTimeout);
  const auto namePatience = std::max<std::chrono::milliseconds>(patience, settings_.joinTimeout);
  const auto start = now_();
  std::optional<TimePoint> resolvedAt;  // the first attempt that got past name resolution
  WaitLines lines(start);
  const auto seconds = [](auto duration) {
    return std::chrono::duration_cast<std::chrono::seconds>(duration).count();
  };
  for (;;) {
    try {
      control_ = backend_.connect(settings_.readTimeout, kConnectAttempt);
      break;
    } catch (const rendezvous::StoreAuthError& error) {
      throw EndpointError(error.what());
    } catch (const rendezvous::StoreHandshakeError& error) {
      // Something answers but is not a ddprun store: no point in waiting for it.
      throw EndpointError(fmt::format("{}; check --rdzv-endpoint", error.what()));
    } catch (const rendezvous::StoreUnresolvedError& error) {
      if (cancelled_) throw MembershipCancelled();
      const auto waited = now_() - start;
      if (waited > namePatience) {
        throw EndpointError(fmt::format(
            "the rendezvous store's host name in {} did not resolve within the join timeout ({} s): "
            "{}; check the name in --rdzv-endpoint (or --master-addr) and this host's DNS",
            backend_.address(), namePatience.count() / 1000.0, error.what()));
      }
      if (lines.due(now_(), "unresolved")) {
        spdlog::warn("waiting for the rendezvous store at {}: name not resolved yet ({} s of {} s)",
                     backend_.address(), seconds(waited), seconds(namePatience));
      }
    } catch (const rendezvous::StoreConnectionError& error) {
      if (cancelled_) throw MembershipCancelled();
      if (!resolvedAt) resolvedAt = now_();
      const auto waited = now_() - *resolvedAt;
      if (waited > patience) {
        throw EndpointError(fmt::format(
            "cannot reach the rendezvous store at {} within {} ({} s): {}; {}", backend_.address(),
            config_.backend == RdzvBackend::kStatic ? "the static rendezvous timeout" : "read_timeout",
            patience.count() / 1000.0, error.what(), backend_.unreachableFix()));
      }
      if (lines.due(now_(), "no answer")) {
        spdlog::warn("waiting for the rendezvous store at {}: no answer yet ({} s of {} s)",
                     backend_.address(), seconds(waited), seconds(patience));
      }
    }
  }
  // A node whose address toward the store was unknown at start (the name did not resolve then).
  if (self_.address.empty()) self_.address = backend_.addressTowardStore();
  // The watch and heartbeat connections must notice a silent store quickly (a cut network
  // sends nothing): their calls time out as fast as a hold lapses, or after heartbeat_timeout.
  const auto quick = settings_.heartbeatTimeout.value_or(std::max(settings_.holdTimeToLive(), 1000ms));
  // Reconnecting after a network blip: the heartbeat's is worth trying for as long as the node
  // counts as alive; the watch's in short attempts, so that it notices the heartbeat's verdict.
  // They follow at once, but a store that thousands of agents open in the same second may take
  // longer than one attempt to accept one more connection (its accept queue full, a SYN resent
  // after 1 s: 4,096 simulated agents, docs/benchmarks.md "Scale"): tried again, as the control
  // connection is, within the same patience, each attempt short enough for cancel() to be noticed.
  const auto connectMore = [&](std::chrono::milliseconds callTimeout, std::chrono::milliseconds attempt) {
    const auto giveUp = now_() + patience;
    for (int tries = 1;; ++tries) {
      try {
        return backend_.connect(callTimeout, attempt);
      } catch (const rendezvous::StoreConnectionError&) {
        if (cancelled_) throw MembershipCancelled();
        // Bounded by the count too: a test's manual clock may stand still.
        if (now_() >= giveUp || tries * attempt >= patience) throw;
      }
    }
  };
  watch_ = connectMore(quick, kConnectAttempt);
  heartbeatStore_ = connectMore(quick, settings_.holdTimeToLive());
  heartbeatCallTimeout_ = quick;

  // A store that is this job's alone is claimed by the run, so that an agent of another run id
  // is told at once instead of waiting beside it; a shared store (an etcd) serves every run id
  // side by side, each under its own prefix, and is claimed by none.
  if (backend_.tenancy() == StoreTenancy::kOneJob) {
    const std::string active = heartbeatStore_->hold(kActiveRunKey, config_.runId, 0ms, "", "");
    if (active != config_.runId) {
      throw MembershipError(fmt::format(
          "the rendezvous store at {} belongs to run '{}', and this agent's run is '{}': agents "
          "of different jobs never share a rendezvous; give this job its own --rdzv-endpoint, or "
          "the same --rdzv-id as the running job to join it",
          backend_.address(), shown(active), config_.runId));
    }
    claimsStore_ = true;
  }
  if (heartbeatStore_->holdLapse() == rendezvous::HoldLapse::kKeyDeletedOnly) {
    lapseReporter_ = std::make_unique<LapseReporter>(connectMore(quick, kConnectAttempt));
  }
  // A ticket, not add(): on etcd a guarded increment that N starting agents race for is O(N^2)
  // raft proposals (Store::takeTicket).
  self_.id = control().takeTicket(keys_.nextNodeId());
  const std::string me = toJsonText(self_);
  control().set(keys_.node(self_.id), me);
  renewHold(-1, -1);
  heartbeatThread_ = std::thread([this] { heartbeat(); });
}

void Membership::renewHold(int round, int groupRank) {
  const std::string notify = round >= 0 ? keys_.stop(round) : std::string();
  const std::string lost = StopReason::nodeLost(self_.id, groupRank, self_.hostname).serialize();
  // The send time, taken before the request leaves: the store starts the hold's time to live
  // when it receives it, later, so the fence counted from here can only be early, never late.
  const TimePoint sent = now_();
  heartbeatStore_->hold(keys_.alive(self_.id), toJsonText(self_),
                        settings_.holdTimeToLive(), notify, lost);
  // Acknowledged. Two threads renew (the heartbeat; the control thread arming a round), so keep
  // the latest send: an older one acknowledged after a newer must not move the time back.
  TimePoint::rep known = lastAckedSend_.load();
  while (known < sent.time_since_epoch().count() &&
         !lastAckedSend_.compare_exchange_weak(known, sent.time_since_epoch().count())) {
  }
}

std::optional<std::chrono::steady_clock::time_point> Membership::livenessAcknowledgedAt() const {
  const TimePoint::rep sent = lastAckedSend_.load();
  if (sent == 0) return std::nullopt;
  return TimePoint(TimePoint::duration(sent));
}

void Membership::fence(int round) {
  int fenced = fencedRound_.load();
  while (fenced < round && !fencedRound_.compare_exchange_weak(fenced, round)) {
  }
  // No renewal from now on: a fenced node's hold must lapse (and the store report it lost), even
  // if the network heals before the store noticed, since its workers are gone.
  heartbeatWake_.notify_all();
}

void Membership::heartbeat() {
  std::unique_lock lock(heartbeatMutex_);
  for (;;) {
    heartbeatWake_.wait_for(lock, settings_.keepAliveInterval, [&] { return heartbeatStop_; });
    if (heartbeatStop_) return;
    if (fencedRound_.load() >= 0) continue;  // fenced: never renew again (fence())
    const int round = heartbeatRound_;
    const int groupRank = heartbeatGroupRank_;
    lock.unlock();
    const auto started = std::chrono::steady_clock::now();
    try {
      renewHold(round, groupRank);
    } catch (const std::exception& error) {
      // Silence or an answer: a call that waited out its whole timeout heard nothing (the network
      // is cut, or the host is down); one that failed sooner was refused or closed by the
      // store's side (the agent hosting it exited). Decided on the time taken, never on the text.
      const bool answered = std::chrono::steady_clock::now() - started < heartbeatCallTimeout_ * 9 / 10;
      {
        std::lock_guard guard(lostMutex_);
        storeLostReason_ = error.what();
      }
      storeClosed_.store(answered);
      storeLost_.store(true);  // every blocked call of ours notices within its next slice
      return;
    }
    lock.lock();
  }
}

void Membership::abandon() {
  cancel();
  {
    std::lock_guard lock(heartbeatMutex_);
    heartbeatStop_ = true;
  }
  heartbeatWake_.notify_all();
  if (heartbeatThread_.joinable()) heartbeatThread_.join();
  if (lapseReporter_) lapseReporter_->stop();
  // Closed without a release: to the store this node vanished, as a killed agent does, and it
  // writes the node_lost notice into the round the hold names unless that round already stopped.
  // The watch connection may still be in a call on the watch thread: it goes with the object.
  heartbeatStore_.reset();
  control_.reset();
}

namespace {

// The job's current round as the store holds it (current_round): one reading for every place
// that reads it. Anything but a round number is refused, never taken for round 0.
int roundNumber(const std::string& text) {
  int round = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), round);
  if (error != std::errc() || end != text.data() + text.size() || round < 0) {
    throw MembershipError(fmt::format("the job's current round in the store is {}, not a round "
                                      "number; is something else writing to the rendezvous store?",
                                      quotedValue(text)));
  }
  return round;
}

}  // namespace

std::optional<int> Membership::storeRound(rendezvous::HoldingStore& store) {
  const std::optional<std::string> text = store.tryGet(keys_.currentRound());
  if (!text) return std::nullopt;
  return roundNumber(*text);
}

bool Membership::mayWriteRound(rendezvous::HoldingStore& store, int round, std::string_view what) {
  // Every write to a round carries the round's number (it is in the key) and is made only while
  // that round is still the job's: a node fenced off it, or one that slept through the others
  // moving on (a frozen agent, a healed partition), writes nothing more there. Check then write:
  // ddprun's store has no multi-key transaction, so the writes that decide (the stop and close
  // records) are also create-if-absent, and a stale one that slips between the two is refused
  // by the store: a round the others left already has its stop record.
  if (fenced(round)) {
    spdlog::debug("not writing {} to round {}: this node is fenced off it", what, round);
    return false;
  }
  if (const auto current = storeRound(store); current && *current > round) {
    spdlog::debug("not writing {} to round {}: the job is in round {}", what, round, *current);
    return false;
  }
  return true;
}

int Membership::currentRound() {
  // The first agent of the run creates the counter at round 0.
  return roundNumber(control().compareSet(keys_.currentRound(), "", "0"));
}

std::optional<Membership::Closed> Membership::closed(int round) {
  const std::optional<std::string> text = control().tryGet(keys_.closed(round));
  if (!text) return std::nullopt;
  const json record = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  Closed result;
  try {
    result.restarts = record.at("restarts").get<int>();
    if (record.contains("members")) {  // a closer that wrote no seats: the members' ids
      result.members = record.at("members").get<std::vector<std::int64_t>>();
      result.nodes = static_cast<int>(result.members.size());
    } else {
      result.nodes = record.at("nodes").get<int>();
      result.closer = record.at("closer").get<std::int64_t>();
      if (result.closer < 0) throw std::out_of_range("closer");
    }
  } catch (const std::exception&) {
    throw MembershipError(fmt::format("round {}'s close record in the store is corrupt", round));
  }
  return result;
}

std::optional<StopReason> Membership::stopOf(int round) {
  const std::optional<std::string> text = control().tryGet(keys_.stop(round));
  if (!text) return std::nullopt;
  return StopReason::parse(*text);
}

bool Membership::alive(std::int64_t node) {
  return control().check({keys_.alive(node)});
}

std::vector<std::int64_t> Membership::stillAlive(const std::vector<std::int64_t>& nodes) {
  // One request names every alive key (the usual answer: all there); only when one is missing
  // is each asked on its own. One check per node on every poll of every joiner made forming a
  // round O(N^2) requests (docs/benchmarks.md, "Scale").
  std::vector<std::string> aliveKeys;
  aliveKeys.reserve(nodes.size());
  for (std::int64_t node : nodes) aliveKeys.push_back(keys_.alive(node));
  if (aliveKeys.empty() || control().check(aliveKeys)) return nodes;
  std::vector<std::int64_t> live;
  for (std::int64_t node : nodes) {
    if (alive(node)) live.push_back(node);
  }
  return live;
}

std::optional<std::vector<std::int64_t>> Membership::liveJoiners(int round) {
  const int joined = static_cast<int>(control().ticketCount(keys_.joined(round)));
  std::vector<std::string> slots;
  for (int k = 1; k <= joined; ++k) slots.push_back(keys_.member(round, k));
  if (!control().check(slots)) return std::nullopt;  // a joiner has counted itself, not written its id
  std::vector<std::int64_t> joiners;
  for (const std::string& text : control().multiGet(slots)) {
    std::int64_t id = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
    if (error != std::errc() || end != text.data() + text.size() || id < 0) {
      throw MembershipError(fmt::format("round {}: a member slot in the store holds {}, not a "
                                        "node id; is something else writing to the rendezvous store?",
                                        round, quotedValue(text)));
    }
    joiners.push_back(id);
  }
  // A node that joined and died before the round closed must not be counted: its workers
  // would never exist, and the others would wait for them.
  std::vector<std::int64_t> live = stillAlive(joiners);
  if (config_.backend == RdzvBackend::kStatic && !live.empty()) {
    std::vector<std::string> nodeKeys;
    for (std::int64_t id : live) nodeKeys.push_back(keys_.node(id));
    const std::vector<std::string> records = control().multiGet(nodeKeys);
    // One live agent per node rank, the earliest: a later one was given a rank that is taken
    // (a restarted agent's dead predecessor is not live, so it never counts here).
    std::map<int, std::string> holders;  // node rank -> host name
    std::vector<std::int64_t> unique;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const auto node = nodeFromJsonText(records[i]);
      if (!node) continue;
      const auto [holder, first] = holders.try_emplace(node->staticRank, node->hostname);
      if (first) {
        unique.push_back(live[i]);
      } else if (live[i] == self_.id) {
        throw BadInputError(fmt::format(
            "--node-rank {} is taken by the running agent on {}: give every agent a distinct "
            "--node-rank (0..{})",
            node->staticRank, shown(holder->second), config_.maxNodes - 1));
      }
    }
    live = std::move(unique);
  }
  return live;
}

std::optional<int> Membership::previousMembersStillAway(int round, const std::vector<std::int64_t>& live) {
  if (round == 0) return std::nullopt;
  const auto previous = closed(round - 1);
  if (!previous) return std::nullopt;
  // A round that ended "done" belongs to a finished run of this id: nobody is away from this
  // one, which starts afresh (a rerun against the same store).
  if (const auto stop = stopOf(round - 1); stop && stop->kind == StopKind::kDone) return std::nullopt;
  // The previous round's members: its world, O(N), read only by the joiners that decide.
  const auto previousIds = memberIds(round - 1, *previous);
  if (!previousIds) return std::nullopt;
  const std::set<std::int64_t> back(live.begin(), live.end());
  std::vector<std::int64_t> notBack;
  for (std::int64_t id : *previousIds) {
    if (back.count(id) == 0) notBack.push_back(id);
  }
  // Not back yet: only worth waiting for if it is still alive.
  return static_cast<int>(stillAlive(notBack).size());
}

bool Membership::maybeClose(int round, const std::vector<std::int64_t>& liveNow, TimePoint& lastCallStart) {
  const std::vector<std::int64_t>* live = &liveNow;
  const int joined = static_cast<int>(live->size());
  bool complete = joined >= config_.maxNodes;
  if (!complete && joined >= config_.minNodes) {
    if (previousMembersStillAway(round, *live) == 0) {
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
  std::vector<std::int64_t> members(live->begin(), live->begin() + std::min(joined, config_.maxNodes));
  if (!mayWriteRound(control(), round, "the close record")) return false;
  // Create-if-absent: of two closers (rare), the first record stays, and it names the closer
  // whose seats its members read (each closer writes its own, under its node id).
  const json record = writeSeats(round, members)
                          ? json{{"nodes", members.size()}, {"closer", self_.id}, {"restarts", restarts}}
                          : json{{"members", members}, {"restarts", restarts}};
  control().compareSet(keys_.closed(round), "", record.dump());
  return true;
}

std::optional<int> Membership::takeSlot(int round) {
  if (!mayWriteRound(control(), round, "a join")) return std::nullopt;
  // The join counter is a ticket key (Store::takeTicket): one write per joiner on every backend.
  const int slot = static_cast<int>(control().takeTicket(keys_.joined(round)));
  control().set(keys_.member(round, slot), std::to_string(self_.id));
  // Keep the job's current round up to date for agents that start later.
  for (std::string current = std::to_string(round - 1); round > 0;) {
    const std::string seen =
        control().compareSet(keys_.currentRound(), current, std::to_string(round));
    // c10d answers `expected` itself only for a missing key (a swap answers the new value, a
    // mismatch the one stored): create it then, or this would ask the same question forever.
    if (seen == current && !current.empty()) {
      current.clear();
      continue;
    }
    if (roundNumber(seen) >= round) break;
    current = seen;
  }
  return slot;
}

std::optional<Round> Membership::waitForClose(int round, int slot, TimePoint deadline) {
  TimePoint lastCallStart{};
  TimePoint shortSince{};  // since when the known nodes are fewer than MIN
  int reportedJoined = -1;
  WaitLines lines(now_());
  std::optional<Closed> record;
  std::optional<TimePoint> lastSlowPass;  // the last pass at the slow pace (a deciding joiner reads the list then)
  const bool big = config_.maxNodes > kNamedJoinersMax;  // too big to name its joiners (kNamedJoinersMax)
  // A job of thousands reads the whole list below MIN as often as it says so (every
  // kWaitLineInterval): each read costs O(N) per joiner.
  const auto fullReadPace = !big ? std::chrono::duration_cast<std::chrono::milliseconds>(kQuietStart)
                                 : std::chrono::duration_cast<std::chrono::milliseconds>(kWaitLineInterval);
  // A big job's joiner does not read the whole list on arrival either (every joiner's first pass
  // read all who came before it: O(N^2) keys for the job); only a deciding one does, below.
  if (big) lastSlowPass = now_();
  int deadJoiners = 0;  // counted in, but dead, at the last full read (a node id never comes back)
  int countedAtFullRead = -1;
  std::optional<int> remaining;  // joiners + members of round-1 still away, when that says anything
  // A bystander is a big job's joiner that can no longer decide (see `decides` below). It never
  // reads the list of joiners: N bystanders reading 3N keys every 10 s, once a forming round took
  // that long, was O(N^2) for the job and sank etcd's re-form of 1,024 nodes. It reads the counter
  // only when a line is due (its line counts the joiners as the counter does, dead ones too),
  // and a wait that timed out on the close key has just seen it absent: its only request a pass
  // is that wait. Its three requests a pass were the store's load while a big round formed; on
  // etcd (hundreds of microseconds of its CPU a request) they lengthened the forming they waited
  // for (docs/benchmarks.md, "Scale"). That too few nodes remain after losses is the deciding
  // joiners' to find: a bystander learns it from the join timeout.
  bool bystander = false;
  bool closeAbsent = false;  // the last wait timed out: nothing was written to the close key
  int counted = 0;
  for (;;) {
    const bool readClose = !closeAbsent;
    closeAbsent = false;
    if (readClose && (record = closed(round))) break;
    throwIfStopped();
    // Below MIN joiners the round cannot close, and the counter (one request) says so: who
    // joined and who is still alive (every slot, every alive key: O(N) for each of N joiners on
    // every poll, O(N^2) for the job; docs/benchmarks.md, "Scale") is read only from MIN on,
    // and below it at the slow pace (fullReadPace) by a joiner that can decide, for the waiting
    // line and the check that enough nodes remain after losses (which starts last_call_timeout:
    // a few seconds late there is nothing).
    const bool slowPassDue = !lastSlowPass || now_() - *lastSlowPass >= fullReadPace;
    if (!bystander || slowPassDue) counted = static_cast<int>(control().ticketCount(keys_.joined(round)));
    std::optional<std::vector<std::int64_t>> live;
    // A small job also reads at each arrival, for its line at once (kNamedJoinersMax).
    const bool arrival = !big && counted != countedAtFullRead;
    // From MIN on, in a job of more than kNamedJoinersMax nodes, only the joiners whose view can
    // close the round read the whole list on every poll: the latest (its arrival may complete the
    // round: MAX, or every live member of round r-1 back) and the one whose slot reached MIN (it
    // times last call from then, as torchrun does). The others wait on the close key and read at
    // the slow pace, which also covers a deciding joiner that died (the next arrival decides
    // too). Everyone reading 3N keys every 50 ms from MIN on was O(N^2) per poll for the job:
    // 4,096 nodes did not form within 90 s (docs/benchmarks.md, "Scale").
    const bool decides = !big || slot == counted || slot == config_.minNodes;
    bystander = !decides;  // the counter only grows: a joiner that cannot decide now never will
    if (slowPassDue) lastSlowPass = now_();
    if ((counted >= config_.minNodes && decides) || arrival || (slowPassDue && decides)) {
      countedAtFullRead = counted;
      live = liveJoiners(round);
      if (live) deadJoiners = std::max(0, counted - static_cast<int>(live->size()));
    }
    if (!live && counted < config_.minNodes) lastCallStart = {};  // as maybeClose would
    if (live && maybeClose(round, *live, lastCallStart)) continue;
    const int joined = live ? static_cast<int>(live->size()) : std::max(0, counted - deadJoiners);
    // After losses, the nodes that can still come back may be fewer than MIN: then only new
    // nodes can save the job, and they get last_call_timeout, not the whole join_timeout.
    // Decided at each full read (live) and kept between them.
    if (live) {
      const auto away = joined < config_.minNodes ? previousMembersStillAway(round, *live) : std::nullopt;
      remaining = away ? std::optional<int>(joined + *away) : std::nullopt;
    }
    if (remaining && *remaining < config_.minNodes) {
      if (shortSince == TimePoint{}) {
        shortSince = now_();
        spdlog::warn("only {} node(s) remain of the at least {} this job needs; waiting up to {} s "
                     "(last_call_timeout) for others to join",
                     *remaining, config_.minNodes, settings_.lastCallTimeout.count() / 1000.0);
      } else if (now_() - shortSince >= settings_.lastCallTimeout) {
        throw MembershipError(fmt::format(
            "only {} node(s) remain of the at least {} this job needs (--nnodes {}:{}): the others "
            "were lost and none joined within last_call_timeout ({} s); restart the lost nodes or "
            "lower the minimum of --nnodes",
            *remaining, config_.minNodes, config_.minNodes, config_.maxNodes,
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
    if (joined != reportedJoined) {  // the log's record of each change (LOGLEVEL=INFO)
      spdlog::info("rendezvous round {} of run '{}': {} node(s) joined, waiting for {}", round,
                   shown(config_.runId), joined,
                   joined < config_.minNodes ? fmt::format("at least {}", config_.minNodes)
                                             : std::string("the round to close"));
      reportedJoined = joined;
    }
    // What the user sees while it waits: who joined, as the store's records say (read only when
    // a line is due), and the time left.
    // A big job's line counts the joiners and names none (thousands of host names, read from N
    // records for each line, say nothing).
    if ((live || bystander) &&
        lines.due(now_(), big ? fmt::format("{}", joined) : fmt::format("{}", fmt::join(*live, ",")))) {
      const bool lastCall = joined >= config_.minNodes;
      const auto left = lastCall && lastCallStart != TimePoint{}
                            ? settings_.lastCallTimeout - (now_() - lastCallStart)
                            : deadline - now_();
      spdlog::warn("{}", joinWaitLine(round, config_.minNodes, config_.maxNodes, joined,
                                      big ? std::vector<std::string>() : hostnames(*live),
                                      std::chrono::duration_cast<std::chrono::milliseconds>(left), lastCall));
    }
    // The close wakes the wait at once; the pace is that of noticing what the counter cannot
    // say (a joiner's death, last call running out). Below MIN neither can close the round (the
    // joiner that brings the count to MIN looks at once, in its first pass), so N waiting
    // joiners poll 4x less often there: their polls are the store's load while a big job forms.
    // A big job's joiner that can no longer decide (a later one came, and its slot is not MIN's:
    // the counter only grows, so that stays so this round) has nothing to notice but the close,
    // which wakes the wait at once, its 10 s reads and a cancel: it polls once a second, so that
    // thousands of them do not make the store's load while the round forms.
    const auto pace = !decides                      ? kJoinPollInterval * 20
                      : counted >= config_.minNodes ? kJoinPollInterval
                                                    : kJoinPollInterval * 4;
    try {
      control().wait({keys_.closed(round)}, pace);
    } catch (const StoreTimeoutError&) {
      closeAbsent = true;
    }
  }
  // The round may have closed without us (last call ran out as we arrived): then we have no seat.
  if (record->closer < 0) {
    if (std::find(record->members.begin(), record->members.end(), self_.id) == record->members.end()) {
      return std::nullopt;
    }
    return readRound(round, *record, std::nullopt);
  }
  auto seat = readSeat(round, *record);
  if (!seat) return std::nullopt;
  return readRound(round, *record, std::move(seat));
}

void Membership::waitForRoundToStop(int round, TimePoint deadline) {
  const std::string stopKey = keys_.stop(round);
  if (control().check({stopKey})) return;  // over already (a finished run of this id, or a re-form)
  spdlog::info("the job already has {} nodes (the maximum); waiting for a place", config_.maxNodes);
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
  const auto stop = stopOf(round);
  if (stop && stop->kind == StopKind::kDone) {
    throw JobOverError(fmt::format(
        "the job finished (every node's workers succeeded) while this agent waited for a place in "
        "it (it keeps its maximum of {} nodes); this agent ran nothing",
        config_.maxNodes));
  }
}

Round Membership::join(int fromRound) {
  const auto deadline = now_() + settings_.joinTimeout;
  int round = fromRound < 0 ? currentRound() : fromRound;
  for (;;) {
    throwIfStopped();
    // Never join a round the job has left (a late agent, a node back from a partition): the
    // fencing token of joins.
    if (const auto current = storeRound(control()); current && *current > round) round = *current;
    const auto record = closed(round);
    if (!record) {
      const auto slot = takeSlot(round);
      if (!slot) continue;  // the job moved on meanwhile
      if (auto joined = waitForClose(round, *slot, deadline)) return *joined;
      continue;  // closed without us: we are a newcomer to the running round now
    }
    // The job runs round `round` without us. At MAX nodes: wait for a place. Below: take a place
    // in the next round first, then tell the members to re-form with us.
    if (record->nodes >= config_.maxNodes) {
      waitForRoundToStop(round, deadline);
      ++round;
      continue;
    }
    const auto slot = takeSlot(round + 1);
    if (!slot) continue;
    // Our own slot moved the job's current round past `round`, which is still running: this
    // notice is the step that stops it, so it skips the token check (it is create-if-absent: a
    // round that stopped meanwhile keeps its own record).
    writeStop(round, StopReason::nodeJoined(self_.id, self_.hostname));
    ++round;
    if (auto joined = waitForClose(round, *slot, deadline)) return *joined;
  }
}

std::vector<NodeInfo> Membership::readMembers(int number, const Closed& record) {
  // The closer found a record it could not read (or node ranks that do not fit): every member's
  // record, one key each, so that the bad one is named.
  std::vector<NodeInfo> members;
  std::vector<std::string> nodeKeys;
  for (std::int64_t id : record.members) nodeKeys.push_back(keys_.node(id));
  for (const std::string& text : control().multiGet(nodeKeys)) {
    auto node = nodeFromJsonText(text);
    if (!node) {
      throw MembershipError(fmt::format("round {}: a node record in the store is malformed ({}); "
                                        "the store was written by something other than ddprun",
                                        number, shown(text)));
    }
    members.push_back(std::move(*node));
  }
  if (const auto problem = roundMembersProblem(record.members, members, self_, config_.maxNodes)) {
    throw MembershipError(fmt::format("round {} in the store is not a world ddprun made: {}; is "
                                      "something else writing to the rendezvous store?",
                                      number, *problem));
  }
  toGroupRankOrder(members);
  return members;
}

std::optional<Seat> Membership::readSeat(int number, const Closed& record) {
  const std::optional<std::string> text = control().tryGet(keys_.seat(number, record.closer, self_.id));
  if (!text) return std::nullopt;  // not a member of this round
  auto seat = seatFromText(*text);
  const auto problem = seat ? seatProblem(*seat, record.nodes, record.closer, self_, config_.maxNodes,
                                          config_.backend == RdzvBackend::kStatic)
                            : std::optional<std::string>("this node's seat is malformed");
  if (problem) {
    throw MembershipError(fmt::format("round {} in the store is not a world ddprun made: {}; is "
                                      "something else writing to the rendezvous store?",
                                      number, *problem));
  }
  return seat;
}

void Membership::toGroupRankOrder(std::vector<NodeInfo>& members) const {
  const int count = static_cast<int>(members.size());
  if (config_.backend == RdzvBackend::kStatic) {
    const auto byRank = [](const NodeInfo& a, const NodeInfo& b) { return a.staticRank < b.staticRank; };
    if (!std::is_sorted(members.begin(), members.end(), byRank)) std::sort(members.begin(), members.end(), byRank);
    for (int i = 0; i < count; ++i) {
      if (members[i].staticRank != i) {
        throw MembershipError(fmt::format(
            "node ranks of the {} agents are not 0..{} (got {} at place {}): give every agent a "
            "distinct --node-rank",
            count, count - 1, members[i].staticRank, i));
      }
    }
  } else {
    // Deterministic group ranks: by address, then by the order the agents first registered.
    // A world from the closer comes sorted already (checked in O(N), not sorted again).
    const auto byAddress = [](const NodeInfo& a, const NodeInfo& b) {
      return std::tie(a.address, a.id) < std::tie(b.address, b.id);
    };
    if (!std::is_sorted(members.begin(), members.end(), byAddress)) {
      std::sort(members.begin(), members.end(), byAddress);
    }
  }
}

bool Membership::writeSeats(int round, const std::vector<std::int64_t>& ids) {
  std::vector<std::string> nodeKeys;
  for (std::int64_t id : ids) nodeKeys.push_back(keys_.node(id));
  std::vector<NodeInfo> members;
  members.reserve(ids.size());
  for (const std::string& text : control().multiGet(nodeKeys)) {
    auto node = nodeFromJsonText(text);
    if (!node) return false;  // each member reads the records itself and names the bad one
    members.push_back(std::move(*node));
  }
  // The same checks a member makes of the records, so that a seat is only written for a world
  // ddprun would make (each member still checks its own seat).
  if (members.empty() || roundMembersProblem(ids, members, members.front(), config_.maxNodes)) return false;
  try {
    toGroupRankOrder(members);
  } catch (const MembershipError&) {
    return false;  // the same: each member says it
  }
  // One request for the N seats (O(N) bytes, once for the job), one for the world; both under
  // this closer's id, before the close record that names it.
  std::vector<std::string> seatKeys;
  std::vector<std::string> seatTexts;
  for (const Seat& seat : seatsOf(members, self_.id)) {
    seatKeys.push_back(keys_.seat(round, self_.id, seat.self.id));
    seatTexts.push_back(seatToText(seat));
  }
  control().multiSet(seatKeys, seatTexts);
  control().set(keys_.world(round, self_.id), worldToText(members));
  return true;
}

std::optional<std::vector<NodeInfo>> Membership::readWorld(int round, std::int64_t closer) {
  return readWorldThrough(control(), round, closer);
}

std::optional<std::vector<NodeInfo>> Membership::readWorldThrough(rendezvous::HoldingStore& store, int round,
                                                                  std::int64_t closer) {
  if (closer < 0) return std::nullopt;
  // check() then get(), not tryGet(): the world is large (~60 bytes a node), and ddprun's store
  // answers a GET of a large value with a reference to the stored one, where tryGet's probe
  // (a compareSet) gets a copy: thousands of members at the exit barrier reading it at once
  // would hold thousands of copies. The closer wrote it before its close record; one deleted
  // since (the round forgotten) is a timeout of the get, and nothing.
  const std::string key = keys_.world(round, closer);
  try {
    if (!store.check({key})) return std::nullopt;
    return worldFromText(store.get(key));
  } catch (const StoreTimeoutError&) {
    return std::nullopt;
  }
}

std::optional<std::vector<std::int64_t>> Membership::memberIds(int round, const Closed& record) {
  if (record.closer < 0) return record.members;
  // A closed round's world never changes (its key names its closer): the deciding joiners, who
  // ask on every poll, read it once.
  if (memberIdsCache_ && memberIdsCache_->round == round && memberIdsCache_->closer == record.closer) {
    return memberIdsCache_->ids;
  }
  const auto world = readWorld(round, record.closer);
  if (!world) return std::nullopt;
  std::vector<std::int64_t> ids;
  ids.reserve(world->size());
  for (const NodeInfo& node : *world) ids.push_back(node.id);
  memberIdsCache_ = MemberIds{round, record.closer, ids};
  return ids;
}

void Membership::settleWorkerStore(Round& round, const std::string& rank0Address) {
  const std::string masterKey = keys_.master(round.number);
  if (round.groupRank == 0) {
    // Forget rounds nobody will read again: every agent is in this round, so none reads r-2.
    // One prefix delete, never a listing of the store (others' keys may be there).
    if (round.number >= 2) control().deletePrefix(keys_.roundPrefix(round.number - 2));
    if (config_.backend == RdzvBackend::kStatic) {
      // The workers share this store, on the port the user gave: remove the previous round's
      // worker keys first (every worker of that round is dead: all agents have rejoined).
      // A stale rank 0 (the others moved on while it formed this round) must not wipe the
      // running round's worker keys.
      if (!mayWriteRound(control(), round.number, "the workers' store")) {
        throw MembershipError(fmt::format("round {} ended before this node could start it; the "
                                          "job is in a later round", round.number));
      }
      StaticStoreFacet& store = *backend_.staticFacet();
      store.clearWorkerKeys();
      control().set(masterKey, store.masterAddress());  // where it really listens (--master-port 0)
    } else {
      round.hostsWorkerStore = true;  // the agent starts it and publishes it (publishWorkerStore)
      return;
    }
  }
  const std::string master = control().get(masterKey);
  // c10d and etcd: group rank 0 hosts it on its advertised address.
  const std::string expectedHost = config_.backend != RdzvBackend::kStatic ? rank0Address : "";
  if (const auto problem = masterProblem(master, expectedHost)) {
    throw MembershipError(fmt::format("round {}'s worker store in the rendezvous store is wrong: {}; "
                                      "is something else writing to the rendezvous store?",
                                      round.number, *problem));
  }
  const auto colon = master.rfind(':');
  round.masterAddr = master.substr(0, colon);
  round.masterPort = static_cast<std::uint16_t>(std::stoi(master.substr(colon + 1)));
}

Round Membership::readRound(int number, const Closed& record, std::optional<Seat> seat) {
  Round round;
  round.number = number;
  round.restartCount = record.restarts;
  round.nodes = record.nodes;
  round.address = self_.address;
  std::vector<NodeInfo> members;  // all of them, where this node reads the list
  if (!seat) {
    // A close record without seats: the members from their records (readMembers), and this
    // node's seat worked out from them as the closer would have.
    members = readMembers(number, record);
    for (Seat& mine : seatsOf(members, -1)) {
      if (mine.self.id == self_.id) seat = std::move(mine);
    }
  } else if (record.nodes <= kNamedJoinersMax) {
    // A small job's members watch every other member (the lapse reports, the early check) and
    // name them in the exit barrier's line: the list, at most kNamedJoinersMax records.
    auto world = readWorld(number, record.closer);
    std::vector<std::int64_t> ids;
    if (world) {
      for (const NodeInfo& node : *world) ids.push_back(node.id);
    }
    const bool fits = world && static_cast<int>(world->size()) == record.nodes &&
                      (*world)[static_cast<std::size_t>(seat->groupRank)].id == self_.id;
    const auto problem = !world ? std::optional<std::string>("the round's member list is missing or malformed")
                         : !fits ? std::optional<std::string>("the member list does not match this node's seat")
                                 : roundMembersProblem(ids, *world, self_, config_.maxNodes);
    if (problem) {
      throw MembershipError(fmt::format("round {} in the store is not a world ddprun made: {}; is "
                                        "something else writing to the rendezvous store?",
                                        number, *problem));
    }
    members = std::move(*world);
  }
  round.groupRank = seat->groupRank;
  round.baseRank = seat->baseRank;
  round.worldSize = seat->worldSize;
  settleWorkerStore(round, seat->rank0Address);
  {
    std::lock_guard lock(heartbeatMutex_);
    heartbeatRound_ = number;
    heartbeatGroupRank_ = round.groupRank;
    roundCloser_ = record.closer;
    roundNodes_ = record.nodes;
    roundMembers_ = members;
    roundNext_ = seat->next;
  }
  // From now on a lapse of our hold must stop this round: armed before anyone starts workers,
  // so that a node lost at any moment of the round is reported to it.
  renewHold(number, round.groupRank);
  if (lapseReporter_) {
    // The store will not write the others' notices: watch their alive keys and write them. In a
    // job of more than kNamedJoinersMax nodes each member watches the next two group ranks (a
    // ring, from its seat): any set of lost nodes short of all has one whose predecessor is
    // still there to report it, and one loss stops the round; everyone watching everyone was N-1
    // keys for each of N watchers, O(N^2) for the store.
    std::vector<LapseReporter::Watched> others;
    if (record.nodes > kNamedJoinersMax) {
      for (const Seat::Neighbour& node : seat->next) {
        others.push_back({keys_.alive(node.id), StopReason::nodeLost(node.id, node.groupRank, node.hostname).serialize()});
      }
    } else {
      for (int rank = 0; rank < static_cast<int>(members.size()); ++rank) {
        if (rank == round.groupRank) continue;
        const NodeInfo& node = members[static_cast<std::size_t>(rank)];
        others.push_back({keys_.alive(node.id), StopReason::nodeLost(node.id, rank, node.hostname).serialize()});
      }
    }
    lapseReporter_->arm(keys_.stop(number), std::move(others));
  }
  return round;
}

void Membership::publishWorkerStore(int round, const std::string& host, std::uint16_t port) {
  if (!mayWriteRound(control(), round, "the workers' store")) return;
  control().set(keys_.master(round), fmt::format("{}:{}", host, port));
}

StopReason Membership::announce(int round, const StopReason& stop) {
  if (!mayWriteRound(control(), round, "a stop record")) return stop;
  return writeStop(round, stop);
}

StopReason Membership::writeStop(int round, const StopReason& stop) {
  const std::string text = stop.serialize();
  const std::string held = control().compareSet(keys_.stop(round), "", text);
  if (held == text) return stop;
  auto earlier = StopReason::parse(held);
  if (!earlier) throw MembershipError(fmt::format("round {}'s stop record in the store is corrupt", round));
  return *earlier;
}

void Membership::markDone(int round, int members) {
  if (!mayWriteRound(control(), round, "the exit barrier's count")) return;
  doneAt_.store(now_().time_since_epoch().count());
  doneRound_.store(round);
  control().set(keys_.finished(round, self_.id), "1");
  if (control().add(keys_.done(round), 1) >= members) announce(round, StopReason::done());
}

std::vector<std::string> Membership::hostnames(const std::vector<std::int64_t>& ids) {
  std::vector<std::string> nodeKeys;
  for (std::int64_t id : ids) nodeKeys.push_back(keys_.node(id));
  std::vector<std::string> names;
  for (const std::string& record : control().multiGet(nodeKeys)) {
    const auto node = nodeFromJsonText(record);
    names.push_back(node ? shown(node->hostname) : std::string("(unreadable record)"));
  }
  return names;
}

void Membership::sayWhoIsAtWork(int round, WaitLines& lines, int& lastCount) {
  const int count = static_cast<int>(watch_->add(keys_.done(round), 0));
  std::vector<NodeInfo> members;
  std::int64_t closer = -1;
  int nodes = 0;
  {
    std::lock_guard lock(heartbeatMutex_);
    if (heartbeatRound_ != round) return;
    members = roundMembers_;
    closer = roundCloser_;
    nodes = roundNodes_;
  }
  lastCount = count;
  // At once when a node finishes, in a job of up to kNamedJoinersMax nodes; a bigger one's every
  // kWaitLineInterval (each of thousands of arrivals at the barrier would otherwise make every
  // waiting node read who finished).
  const bool small = nodes <= kNamedJoinersMax;
  if (!lines.due(now_(), small ? std::to_string(count) : std::string())) return;
  if (members.empty()) {
    // A big job's member knows its seat, not the list: read the world once, at the first line
    // that is due (a node that waits kWaitLineInterval at the barrier), never at the round's start.
    auto world = readWorldThrough(*watch_, round, closer);
    if (!world || static_cast<int>(world->size()) != nodes) {
      spdlog::warn("waiting for {} of {} nodes to finish", nodes - count, nodes);
      return;
    }
    members = std::move(*world);
    std::lock_guard lock(heartbeatMutex_);
    if (heartbeatRound_ == round) roundMembers_ = members;
  }
  // Who finished: one listing of the round's finished/ keys (one request, not one per member:
  // that was N requests per line for each waiting node). A listing cut at the store's limit
  // names no one rather than the wrong nodes.
  const rendezvous::ListedKeys listed = watch_->listPrefix(keys_.finishedPrefix(round), members.size());
  const std::set<std::string> finished(listed.keys.begin(), listed.keys.end());
  const auto doneAt = TimePoint(TimePoint::duration(doneAt_.load()));
  const auto left = settings_.exitBarrierTimeout - (now_() - doneAt);
  if (listed.more) {
    spdlog::warn("waiting for {} of {} nodes to finish, {} s left", static_cast<int>(members.size()) - count,
                 members.size(), std::chrono::duration_cast<std::chrono::seconds>(left).count());
    return;
  }
  std::vector<std::pair<int, std::string>> atWork;  // group rank, host name
  for (std::size_t rank = 0; rank < members.size(); ++rank) {
    if (finished.count(keys_.finished(round, members[rank].id)) != 0) continue;
    atWork.emplace_back(static_cast<int>(rank), shown(members[rank].hostname));
  }
  if (atWork.empty()) return;
  spdlog::warn("{}", barrierWaitLine(atWork, std::chrono::duration_cast<std::chrono::milliseconds>(left)));
}

void Membership::reportMembersLostEarly(int round) {
  std::vector<NodeInfo> members;
  std::vector<Seat::Neighbour> next;
  int nodes = 0;
  {
    std::lock_guard lock(heartbeatMutex_);
    if (heartbeatRound_ != round) return;
    members = roundMembers_;
    next = roundNext_;
    nodes = roundNodes_;
  }
  // Every member's alive key in one request (the usual answer: all there); one request per
  // member from every member made this O(N^2) for the job at each round's start. In a job of
  // more than kNamedJoinersMax nodes each member asks only the next group rank's (a ring): every
  // member is still asked by one other, and a lost asker is itself found by its predecessor (any
  // one loss stops the round); N keys from each of N members was O(N^2) keys at every re-form.
  std::vector<Seat::Neighbour> asked;
  if (nodes > kNamedJoinersMax || members.empty()) {
    if (!next.empty()) asked.push_back(next.front());
  } else {
    for (std::size_t rank = 0; rank < members.size(); ++rank) {
      const NodeInfo& node = members[rank];
      if (node.id != self_.id) asked.push_back({static_cast<int>(rank), node.id, node.hostname});
    }
  }
  std::vector<std::string> others;
  for (const Seat::Neighbour& node : asked) others.push_back(keys_.alive(node.id));
  if (others.empty() || watch_->check(others)) return;
  for (const Seat::Neighbour& node : asked) {
    if (watch_->check({keys_.alive(node.id)})) continue;
    const std::string lost = StopReason::nodeLost(node.id, node.groupRank, node.hostname).serialize();
    if (!mayWriteRound(*watch_, round, "a lost member's notice")) return;
    watch_->compareSet(keys_.stop(round), "", lost);
    return;
  }
}

StopReason Membership::waitForStop(int round) {
  const std::string stopKey = keys_.stop(round);
  bool checkedMembers = false;
  std::optional<WaitLines> barrierLines;  // from when this node counted itself done
  int finishedCount = -1;
  TimePoint lastCountRead{};
  std::optional<std::chrono::steady_clock::time_point> troubleSince;
  for (;;) {
    try {
      // In slices: a store that went silent (network cut) is the heartbeat's to report, and the
      // slices keep this thread from blocking past the agent's life. A stop wakes it at once.
      watch_->wait({stopKey}, 250ms);
      // Read as it is now (one request): a stop record is never deleted while its round runs;
      // one gone meanwhile (the round forgotten) is waited for again.
      const std::optional<std::string> text = watch_->tryGet(stopKey);
      if (!text) continue;
      if (auto stop = StopReason::parse(*text)) return *stop;
      throw MembershipError(fmt::format("round {}'s stop record in the store is corrupt: {}", round,
                                        shown(*text)));
    } catch (const rendezvous::StoreConnectionError& error) {
      // A network blip broke the watch's connection (it holds nothing, so dropping it tells the
      // store nothing). The heartbeat decides whether the store is lost: until it does, or for
      // at most twice the liveness timeout, reconnect and watch again.
      throwIfStopped();
      const auto now = std::chrono::steady_clock::now();
      if (!troubleSince) troubleSince = now;
      if (now - *troubleSince > 2 * settings_.holdTimeToLive()) throw StoreLostError(error.what());
      std::this_thread::sleep_for(100ms);
      continue;
    } catch (const StoreTimeoutError&) {
      throwIfStopped();
      troubleSince.reset();
      // Every live member armed its hold for this round before starting its workers, a few
      // milliseconds after the round closed; one that died in between is reported here.
      if (!checkedMembers) {
        checkedMembers = true;
        reportMembersLostEarly(round);
      }
      // In the exit barrier: who is still at work, read at most once a second.
      if (doneRound_.load() == round && now_() - lastCountRead >= kQuietStart) {
        lastCountRead = now_();
        if (!barrierLines) barrierLines.emplace(TimePoint(TimePoint::duration(doneAt_.load())));
        sayWhoIsAtWork(round, *barrierLines, finishedCount);
      }
    }
  }
}

bool Membership::stopHeartbeat() {
  {
    std::lock_guard lock(heartbeatMutex_);
    if (heartbeatStop_ && !heartbeatThread_.joinable()) return false;
    heartbeatStop_ = true;
  }
  heartbeatWake_.notify_all();
  if (heartbeatThread_.joinable()) heartbeatThread_.join();
  // Before our holds go: the others leaving from now on is no news to report.
  if (lapseReporter_) lapseReporter_->stop();
  return true;
}

void Membership::close(bool hostsStore, std::optional<std::chrono::milliseconds> patience) {
  if (!stopHeartbeat()) return;
  // A fenced node leaves without a release: its connections close with the object, and the
  // store reports it lost to its round if it has not yet (a quiet release would leave the others
  // waiting on workers that are gone).
  if (!heartbeatStore_ || storeLost() || fencedRound_.load() >= 0) return;
  try {
    heartbeatStore_->release(keys_.alive(self_.id));
    if (claimsStore_) heartbeatStore_->release(kActiveRunKey);
    if (hostsStore) {
      // This agent hosts the store: the others read the final state from it, so let them leave
      // first (bounded: one that died is gone with its connection anyway). Whether any alive key
      // is left is one bounded listing of our run's prefix (maxKeys 0: only "any?").
      const auto deadline = std::chrono::steady_clock::now() + patience.value_or(settings_.closeTimeout);
      while (std::chrono::steady_clock::now() < deadline) {
        if (!control().listPrefix(keys_.alivePrefix(), 0).more) break;
        std::this_thread::sleep_for(5ms);
      }
    }
    // A shared store (an etcd) outlives the job and nobody's exit takes it along: the last agent
    // out removes the run's keys, one prefix delete (each agent's alive key, held until its own
    // close, says who is still there).
    if (backend_.tenancy() == StoreTenancy::kShared && !control().listPrefix(keys_.alivePrefix(), 0).more) {
      control().deletePrefix(keys_.prefix());
    }
  } catch (const std::exception& error) {
    spdlog::debug("leaving the rendezvous: {}", error.what());
  }
}

std::string joinWaitLine(int round, int minNodes, int maxNodes, int joined,
                         const std::vector<std::string>& joinedHosts,
                         std::chrono::milliseconds left, bool lastCall) {
  const long seconds = std::max<long>(0, std::chrono::duration_cast<std::chrono::seconds>(left).count());
  const std::string names = fmt::format("{}", fmt::join(joinedHosts, ", "));
  if (lastCall) {
    return fmt::format("rendezvous round {}: {} of at most {} nodes joined{}; waiting {} s more "
                       "(last_call_timeout) for others before it closes",
                       round, joined, maxNodes, names.empty() ? "" : " (" + names + ")", seconds);
  }
  const int missing = minNodes - joined;
  return fmt::format("waiting for {} more node{} ({} of {}{} joined{}), {} s left of the join "
                     "timeout",
                     missing, missing == 1 ? "" : "s", joined, minNodes == maxNodes ? "" : "at least ",
                     minNodes, names.empty() ? "" : ": " + names, seconds);
}

std::string barrierWaitLine(const std::vector<std::pair<int, std::string>>& atWork,
                            std::chrono::milliseconds left) {
  std::vector<std::string> nodes;
  for (const auto& [rank, host] : atWork) nodes.push_back(fmt::format("{} (group rank {})", host, rank));
  const long seconds = std::chrono::duration_cast<std::chrono::seconds>(left).count();
  const std::string time = seconds > 0 ? fmt::format("{} s left", seconds)
                                       : std::string("the exit barrier's timeout has passed");
  return fmt::format("waiting for node{} {} to finish, {}", atWork.size() == 1 ? "" : "s",
                     fmt::join(nodes, ", "), time);
}

}  // namespace ddprun::launcher
