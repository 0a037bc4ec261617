#include "membership/round_records.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>

#include "core/shown_text.h"
#include "ddprun/common/port.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {

using nlohmann::json;

namespace {

// A decimal number and nothing else: the whole text, no sign, no spaces.
template <typename Int>
std::optional<Int> wholeNumber(std::string_view text) {
  Int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int> roundNumberFromText(std::string_view text) { return wholeNumber<int>(text); }

std::optional<std::int64_t> nodeIdFromText(std::string_view text) {
  return wholeNumber<std::int64_t>(text);
}

std::string closeRecordToText(const CloseRecord& record) {
  json value = toJson(record.history);  // "restarts" and what else the history holds
  if (record.closer < 0) {
    value["members"] = record.members;
  } else {
    value["nodes"] = record.nodes;
    value["closer"] = record.closer;
  }
  return value.dump();
}

std::optional<CloseRecord> closeRecordFromText(std::string_view text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  CloseRecord record;
  try {
    record.history = restartHistoryFromJson(value);
    if (value.contains("members")) {  // a closer that wrote no seats: the members' ids
      record.members = value.at("members").get<std::vector<std::int64_t>>();
      record.nodes = static_cast<int>(record.members.size());
    } else {
      record.nodes = value.at("nodes").get<int>();
      record.closer = value.at("closer").get<std::int64_t>();
      if (record.closer < 0) return std::nullopt;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return record;
}

std::optional<std::string> toGroupRankOrder(std::vector<NodeInfo>& members, bool staticRanks) {
  const int count = static_cast<int>(members.size());
  if (staticRanks) {
    const auto byRank = [](const NodeInfo& a, const NodeInfo& b) {
      return a.staticRank < b.staticRank;
    };
    if (!std::is_sorted(members.begin(), members.end(), byRank))
      std::sort(members.begin(), members.end(), byRank);
    for (int i = 0; i < count; ++i) {
      if (members[static_cast<std::size_t>(i)].staticRank != i) {
        return fmt::format("node ranks of the {} agents are not 0..{} (got {} at place {})", count,
                           count - 1, members[static_cast<std::size_t>(i)].staticRank, i);
      }
    }
    return std::nullopt;
  }
  // Deterministic group ranks: by address, then by the order the agents first registered. A world
  // from the closer comes sorted already (checked in O(N), not sorted again).
  const auto byAddress = [](const NodeInfo& a, const NodeInfo& b) {
    return std::tie(a.address, a.id) < std::tie(b.address, b.id);
  };
  if (!std::is_sorted(members.begin(), members.end(), byAddress)) {
    std::sort(members.begin(), members.end(), byAddress);
  }
  return std::nullopt;
}

std::string toJsonText(const NodeInfo& node) {
  // A host name is whatever gethostname() gave: bytes that are not UTF-8 must not make dump()
  // throw.
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
  return json::array({node.id, node.nproc, common::validUtf8(node.address),
                      common::validUtf8(node.hostname), node.pid, node.staticRank});
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
    next.push_back(
        json::array({neighbour.groupRank, neighbour.id, common::validUtf8(neighbour.hostname)}));
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
    if (!next.is_array() || next.size() > static_cast<std::size_t>(kSeatNeighbours))
      return std::nullopt;
    for (const json& entry : next) {
      if (!entry.is_array() || entry.size() != 3) return std::nullopt;
      seat.next.push_back(
          {entry[0].get<int>(), entry[1].get<std::int64_t>(), entry[2].get<std::string>()});
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return seat;
}

std::optional<std::string> seatProblem(const Seat& seat, int nodes, std::int64_t closer,
                                       const NodeInfo& self, int maxNodes, bool staticRanks) {
  if (seat.closer != closer) {
    return fmt::format("this node's seat was written by node {}, the close record by node {}",
                       seat.closer, closer);
  }
  if (nodes < 1 || nodes > maxNodes)
    return fmt::format("{} members where the job allows 1 to {}", nodes, maxNodes);
  if (seat.nodes != nodes)
    return fmt::format("this node's seat counts {} members, the close record {}", seat.nodes,
                       nodes);
  const NodeInfo& mine = seat.self;
  if (mine.id != self.id || mine.address != self.address || mine.nproc != self.nproc ||
      mine.pid != self.pid || mine.staticRank != self.staticRank) {
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
    return fmt::format("ranks {}..{} of a world of {}", seat.baseRank,
                       seat.baseRank + mine.nproc - 1, seat.worldSize);
  }
  if (seat.rank0Address.empty()) return std::string("group rank 0 has no address");
  if (seat.groupRank == 0 && seat.rank0Address != mine.address) {
    return fmt::format("group rank 0's address {} is not this node's ({})",
                       shown(seat.rank0Address), shown(mine.address));
  }
  for (const Seat::Neighbour& neighbour : seat.next) {
    if (neighbour.groupRank < 0 || neighbour.groupRank >= nodes ||
        neighbour.groupRank == seat.groupRank || neighbour.id < 0 || neighbour.id == self.id) {
      return fmt::format("a neighbour at group rank {} (node {})", neighbour.groupRank,
                         neighbour.id);
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
  if (members.size() != ids.size())
    return fmt::format("{} node records for {} members", members.size(), ids.size());
  std::set<std::int64_t> seen;
  bool selfIn = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const NodeInfo& node = members[i];
    if (!seen.insert(ids[i]).second) return fmt::format("node {} is a member twice", ids[i]);
    if (node.id != ids[i])
      return fmt::format("the record of node {} says it is node {}", ids[i], node.id);
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

std::optional<std::string> masterProblem(const std::string& master,
                                         const std::string& expectedHost) {
  const auto colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return fmt::format("{} is not host:port", quotedValue(master));
  const auto port = common::parsePort(std::string_view(master).substr(colon + 1));
  if (!port || *port == 0) return fmt::format("{} has no port in 1..65535", quotedValue(master));
  if (!expectedHost.empty() && master.substr(0, colon) != expectedHost) {
    return fmt::format("{} is not on group rank 0's address {}", quotedValue(master),
                       shown(expectedHost));
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
