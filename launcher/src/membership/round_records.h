// The records of a round, as they are written to and read from the rendezvous store: pure
// functions of text in, values (or the problem, in one line) out; no store, no clock.
//
// Nothing read from the store is trusted blindly (anyone who reaches it can write it): what makes
// a round's world is checked before any worker is started. Each *Problem function returns the
// problem in one line, or nothing when the value holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rendezvous_client.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

// Up to this many nodes every member watches and names every other member (the lapse reports,
// the waiting lines); a bigger job's members know their seat and their ring neighbours only.
inline constexpr int kNamedJoinersMax = 64;

// A member's seat in a closed round (round/<r>/seat/<closer>/<id>): what it needs to take its
// place, written by the closer for each member so that a member reads O(1) bytes, not the world.
struct Seat {
  std::int64_t closer = -1;  // the node that closed the round (the close record names it too)
  int nodes = 0;             // members in the round
  int groupRank = 0;
  int baseRank = 0;  // the global rank of this member's local rank 0
  int worldSize = 0;
  NodeInfo self;             // this member's record as the closer read it
  std::string rank0Address;  // group rank 0's (where the round's workers' store is, on c10d/etcd)
  // The next group ranks after this member's, in ring order (at most kSeatNeighbours, fewer in
  // a round of fewer nodes): whose liveness this member watches in a big job.
  struct Neighbour {
    int groupRank = 0;
    std::int64_t id = -1;
    std::string hostname;
  };
  std::vector<Neighbour> next;
};
inline constexpr int kSeatNeighbours = 2;

// The close record of a round (round/<r>/closed): how many members, the node that closed it
// (whose seats and world they read), and the job's restart history (its restart count first). A
// closer that could not read every member's record names the members' ids instead (`members`,
// closer -1): each member then reads the records itself and names the bad one.
struct CloseRecord {
  int nodes = 0;
  std::int64_t closer = -1;
  std::vector<std::int64_t> members;  // only in a record without seats
  RestartHistory history;
};
std::string closeRecordToText(const CloseRecord& record);
// Nothing back when the text is not a record closeRecordToText wrote.
std::optional<CloseRecord> closeRecordFromText(std::string_view text);

// The job's current round (current_round): a round number, never anything else taken for round 0.
std::optional<int> roundNumberFromText(std::string_view text);
// A member slot (round/<r>/member/<k>): the id of the node that took it.
std::optional<std::int64_t> nodeIdFromText(std::string_view text);

std::string toJsonText(const NodeInfo& node);
std::optional<NodeInfo> nodeFromJsonText(std::string_view text);
// A round's world (round/<r>/world): its members' records, in group-rank order, as one compact
// JSON array of [id, nproc, address, hostname, pid, static_rank]. Nothing back when the text is
// not such an array or any entry fails nodeFromJsonText's checks.
std::string worldToText(const std::vector<NodeInfo>& members);
std::optional<std::vector<NodeInfo>> worldFromText(std::string_view text);
// Every member's seat of a round whose members are `members` (group-rank order), closed by node
// `closer`; in the same order.
std::vector<Seat> seatsOf(const std::vector<NodeInfo>& members, std::int64_t closer);
// A seat as one compact JSON object; nothing back when the text is not one seatToText wrote
// (fields missing or of the wrong type, a record that fails nodeFromJsonText's checks).
std::string seatToText(const Seat& seat);
std::optional<Seat> seatFromText(std::string_view text);

// Puts `members` in group-rank order: with static node ranks (`staticRanks`) by node rank, which
// must then be 0..N-1 (else the problem, and the order is unspecified); else by address, then by
// the order the agents first registered (a list already in that order is checked, not sorted).
std::optional<std::string> toGroupRankOrder(std::vector<NodeInfo>& members, bool staticRanks);

// The members of a closed round (`ids`, from its close record) and their node records
// (`members`, in the same order): each record is the one stored under its id, no id twice, a
// sane nproc, this node's own record exactly as it wrote it (`self`), and `ids.size()` within
// [1, maxNodes].
std::optional<std::string> roundMembersProblem(const std::vector<std::int64_t>& ids,
                                               const std::vector<NodeInfo>& members,
                                               const NodeInfo& self, int maxNodes);
// This node's seat (`seat`, read from round/<r>/seat/<closer>/<self id>) against the close record
// (`nodes` members, closed by `closer`): the same closer and count, within [1, maxNodes], this
// node's own record exactly as it wrote it, ranks that fit (group rank in the round, base rank
// plus its workers within the world, group rank 0's address its own where it is rank 0), with
// static node ranks (`staticRanks`) the group rank its node rank, and neighbours in the round.
std::optional<std::string> seatProblem(const Seat& seat, int nodes, std::int64_t closer,
                                       const NodeInfo& self, int maxNodes, bool staticRanks);
// "host:port" of the round's worker store: a port in 1..65535, and (c10d) the host is the
// address group rank 0 advertised (`expectedHost`; "" = any).
std::optional<std::string> masterProblem(const std::string& master,
                                         const std::string& expectedHost);

}  // namespace ddprun::launcher
