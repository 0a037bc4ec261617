// Membership: a round's records through the store (round_records.h encodes and checks them).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/shown_text.h"
#include "ddprun/common/port.h"
#include "membership/membership.h"

namespace ddprun::launcher {

using rendezvous::StoreTimeoutError;

int Membership::roundFrom(const std::string& text) {
  const auto round = roundNumberFromText(text);
  if (!round) {
    throw MembershipError(
        fmt::format("the job's current round in the store is {}, not a round "
                    "number; is something else writing to the rendezvous store?",
                    quotedValue(text)));
  }
  return *round;
}

std::optional<int> Membership::storeRound(rendezvous::HoldingStore& store) {
  const std::optional<std::string> text = store.tryGet(keys_.currentRound());
  if (!text) return std::nullopt;
  return roundFrom(*text);
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

std::optional<Membership::Closed> Membership::closed(int round) {
  const std::optional<std::string> text = control().tryGet(keys_.closed(round));
  if (!text) return std::nullopt;
  auto record = closeRecordFromText(*text);
  if (!record)
    throw MembershipError(fmt::format("round {}'s close record in the store is corrupt", round));
  return record;
}

std::optional<StopReason> Membership::stopOf(int round) {
  const std::optional<std::string> text = control().tryGet(keys_.stop(round));
  if (!text) return std::nullopt;
  return StopReason::parse(*text);
}

bool Membership::alive(std::int64_t node) { return control().check({keys_.alive(node)}); }

std::vector<std::int64_t> Membership::stillAlive(const std::vector<std::int64_t>& nodes) {
  // One request names every alive key (the usual answer: all there); only when one is missing
  // is each asked on its own (a check per node on every poll of every joiner is O(N^2) requests
  // for the job).
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
  if (!control().check(slots))
    return std::nullopt;  // a joiner has counted itself, not written its id
  std::vector<std::int64_t> joiners;
  for (const std::string& text : control().multiGet(slots)) {
    const auto id = nodeIdFromText(text);
    if (!id) {
      throw MembershipError(
          fmt::format("round {}: a member slot in the store holds {}, not a "
                      "node id; is something else writing to the rendezvous store?",
                      round, quotedValue(text)));
    }
    joiners.push_back(*id);
  }
  // A node that joined and died before the round closed must not be counted: its workers
  // would never exist, and the others would wait for them.
  std::vector<std::int64_t> live = stillAlive(joiners);
  if (config_.backend == RdzvBackend::kStatic && !live.empty()) live = onePerNodeRank(live);
  return live;
}

std::vector<std::int64_t> Membership::onePerNodeRank(const std::vector<std::int64_t>& live) {
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
  return unique;
}

std::optional<std::vector<std::int64_t>> Membership::previousMembers(int round) {
  if (round == 0) return std::nullopt;
  const auto previous = closed(round - 1);
  if (!previous) return std::nullopt;
  // A round that ended "done" belongs to a finished run of this id: nobody is away from this
  // one, which starts afresh (a rerun against the same store).
  if (const auto stop = stopOf(round - 1); stop && stop->kind == StopKind::kDone)
    return std::nullopt;
  // The previous round's members: its world, O(N), read only by the joiners that decide.
  return memberIds(round - 1, *previous);
}

std::optional<int> Membership::previousMembersStillAway(int round,
                                                        const std::vector<std::int64_t>& live) {
  const auto previousIds = previousMembers(round);
  if (!previousIds) return std::nullopt;
  const std::set<std::int64_t> back(live.begin(), live.end());
  std::vector<std::int64_t> notBack;
  for (std::int64_t id : *previousIds) {
    if (back.count(id) == 0) notBack.push_back(id);
  }
  // Not back yet: only worth waiting for if it is still alive.
  return static_cast<int>(stillAlive(notBack).size());
}

bool Membership::maybeClose(int round, const std::vector<std::int64_t>& live, LastCall& lastCall) {
  const int joined = static_cast<int>(live.size());
  const auto away =
      lastCall.asksWhoIsAway(joined) ? previousMembersStillAway(round, live) : std::nullopt;
  if (!lastCall.closes(joined, away, now_())) return false;
  RestartHistory history;
  if (round > 0) {
    if (const auto previous = closed(round - 1)) {
      const auto stop = stopOf(round - 1);
      history = stop ? historyAfter(previous->history, *stop) : previous->history;
    }
  }
  // The members coming back keep their places ahead of spares and new nodes (the previous
  // round's list is cached: read above where anyone could be away).
  const std::vector<std::int64_t> members =
      roundMembers(live,
                   static_cast<int>(live.size()) > config_.maxNodes
                       ? previousMembers(round).value_or(std::vector<std::int64_t>())
                       : std::vector<std::int64_t>(),
                   config_.maxNodes);
  if (!mayWriteRound(control(), round, "the close record")) return false;
  // Create-if-absent: of two closers (rare), the first record stays, and it names the closer
  // whose seats its members read (each closer writes its own, under its node id).
  CloseRecord record;
  record.history = history;
  record.nodes = static_cast<int>(members.size());
  if (writeSeats(round, members)) {
    record.closer = self_.id;
  } else {
    record.members = members;
  }
  control().compareSet(keys_.closed(round), "", closeRecordToText(record));
  return true;
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

std::vector<NodeInfo> Membership::readMembers(int number, const Closed& record) {
  // The closer found a record it could not read (or node ranks that do not fit): every member's
  // record, one key each, so that the bad one is named.
  std::vector<NodeInfo> members;
  std::vector<std::string> nodeKeys;
  for (std::int64_t id : record.members) nodeKeys.push_back(keys_.node(id));
  for (const std::string& text : control().multiGet(nodeKeys)) {
    auto node = nodeFromJsonText(text);
    if (!node) {
      throw MembershipError(
          fmt::format("round {}: a node record in the store is malformed ({}); "
                      "the store was written by something other than ddprun",
                      number, shown(text)));
    }
    members.push_back(std::move(*node));
  }
  if (const auto problem = roundMembersProblem(record.members, members, self_, config_.maxNodes)) {
    throw MembershipError(
        fmt::format("round {} in the store is not a world ddprun made: {}; is "
                    "something else writing to the rendezvous store?",
                    number, *problem));
  }
  if (const auto problem = toGroupRankOrder(members, config_.backend == RdzvBackend::kStatic)) {
    throw MembershipError(fmt::format("{}: give every agent a distinct --node-rank", *problem));
  }
  return members;
}

std::optional<Seat> Membership::readSeat(int number, const Closed& record) {
  const std::optional<std::string> text =
      control().tryGet(keys_.seat(number, record.closer, self_.id));
  if (!text) return std::nullopt;  // not a member of this round
  auto seat = seatFromText(*text);
  const auto problem = seat ? seatProblem(*seat, record.nodes, record.closer, self_,
                                          config_.maxNodes, config_.backend == RdzvBackend::kStatic)
                            : std::optional<std::string>("this node's seat is malformed");
  if (problem) {
    throw MembershipError(
        fmt::format("round {} in the store is not a world ddprun made: {}; is "
                    "something else writing to the rendezvous store?",
                    number, *problem));
  }
  return seat;
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
  if (members.empty() || roundMembersProblem(ids, members, members.front(), config_.maxNodes))
    return false;
  if (toGroupRankOrder(members, config_.backend == RdzvBackend::kStatic)) return false;  // the same
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

std::optional<std::vector<NodeInfo>> Membership::readWorldThrough(rendezvous::HoldingStore& store,
                                                                  int round, std::int64_t closer) {
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
  if (memberIdsCache_ && memberIdsCache_->round == round &&
      memberIdsCache_->closer == record.closer) {
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
        throw MembershipError(
            fmt::format("round {} ended before this node could start it; the "
                        "job is in a later round",
                        round.number));
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
    throw MembershipError(
        fmt::format("round {}'s worker store in the rendezvous store is wrong: {}; "
                    "is something else writing to the rendezvous store?",
                    round.number, *problem));
  }
  const auto colon = master.rfind(':');
  round.masterAddr = master.substr(0, colon);
  round.masterPort = *common::parsePort(std::string_view(master).substr(colon + 1));
}

Round Membership::readRound(int number, const Closed& record, std::optional<Seat> seat) {
  Round round;
  round.number = number;
  round.history = record.history;
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
    members = readCheckedWorld(number, record, *seat);
  }
  round.groupRank = seat->groupRank;
  round.baseRank = seat->baseRank;
  round.worldSize = seat->worldSize;
  settleWorkerStore(round, seat->rank0Address);
  // From now on a lapse of our hold must stop this round: armed before anyone starts workers,
  // so that a node lost at any moment of the round is reported to it.
  liveness_.arm(ArmedRound{number, round.groupRank, record.closer, record.nodes, std::move(members),
                           seat->next});
  return round;
}

std::vector<NodeInfo> Membership::readCheckedWorld(int number, const Closed& record,
                                                   const Seat& seat) {
  auto world = readWorld(number, record.closer);
  std::vector<std::int64_t> ids;
  if (world) {
    for (const NodeInfo& node : *world) ids.push_back(node.id);
  }
  const bool fits = world && static_cast<int>(world->size()) == record.nodes &&
                    (*world)[static_cast<std::size_t>(seat.groupRank)].id == self_.id;
  const auto problem =
      !world  ? std::optional<std::string>("the round's member list is missing or malformed")
      : !fits ? std::optional<std::string>("the member list does not match this node's seat")
              : roundMembersProblem(ids, *world, self_, config_.maxNodes);
  if (problem) {
    throw MembershipError(
        fmt::format("round {} in the store is not a world ddprun made: {}; is "
                    "something else writing to the rendezvous store?",
                    number, *problem));
  }
  return std::move(*world);
}

}  // namespace ddprun::launcher
