// The records of a round (membership/round_records.h) that membership_test.cc does not cover: the
// close record, the current round and a member slot as text, and the group-rank order. Pure: text
// in, value or refusal out. Anyone who reaches the store can write it, so every refusal counts.
#include "membership/round_records.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace ddprun::launcher;

NodeInfo node(std::int64_t id, const std::string& address, int staticRank = -1) {
  NodeInfo info;
  info.id = id;
  info.address = address;
  info.hostname = "host-" + address;
  info.nproc = 2;
  info.pid = 1000 + id;
  info.staticRank = staticRank;
  return info;
}

TEST_CASE("a close record with seats names its closer, one without names the members",
          "[round_records][close]") {
  CloseRecord seated;
  seated.nodes = 3;
  seated.closer = 7;
  seated.history.restarts = 2;
  seated.history.noProgress = 1;
  seated.history.signature = "ValueError at x.py:3";
  const auto back = closeRecordFromText(closeRecordToText(seated));
  REQUIRE(back);
  CHECK(back->nodes == 3);
  CHECK(back->closer == 7);
  CHECK(back->history == seated.history);  // the restart history travels whole
  CHECK(back->members.empty());

  CloseRecord listed;
  listed.members = {4, 9};
  listed.nodes = 2;
  listed.history.restarts = 0;
  const auto list = closeRecordFromText(closeRecordToText(listed));
  REQUIRE(list);
  CHECK(list->closer == -1);
  CHECK(list->nodes == 2);
  CHECK(list->members == std::vector<std::int64_t>{4, 9});
  // The wire form stays what agents of this version read.
  CHECK(
      closeRecordToText(seated) ==
      R"({"closer":7,"no_progress":1,"nodes":3,"restarts":2,"signature":"ValueError at x.py:3"})");
  CHECK(closeRecordToText(listed) == R"({"members":[4,9],"restarts":0})");
}

TEST_CASE("a close record ddprun did not write is refused", "[round_records][close]") {
  for (const char* text :
       {"", "3", "[]", R"({"nodes":3,"closer":7})", R"({"nodes":"3","closer":7,"restarts":0})",
        R"({"nodes":3,"closer":-1,"restarts":0})", R"({"members":"4,9","restarts":0})",
        R"({"restarts":0})"}) {
    INFO(text);
    CHECK_FALSE(closeRecordFromText(text));
  }
}

TEST_CASE("the current round and a member slot are whole decimal numbers, nothing else",
          "[round_records]") {
  CHECK(roundNumberFromText("0") == 0);
  CHECK(roundNumberFromText("12") == 12);
  CHECK(nodeIdFromText("4294967297") == std::int64_t{4294967297});
  for (const char* text : {"", "-1", "1x", " 1", "+1", "one", "99999999999"}) {
    INFO(text);
    CHECK_FALSE(roundNumberFromText(text));
  }
  for (const char* text : {"", "-3", "7 ", "0x7"}) {
    INFO(text);
    CHECK_FALSE(nodeIdFromText(text));
  }
}

TEST_CASE("group ranks: by address then registration, or by node rank, which must be 0..N-1",
          "[round_records][group_rank]") {
  std::vector<NodeInfo> members = {node(5, "10.0.0.2"), node(3, "10.0.0.1"), node(1, "10.0.0.2")};
  CHECK_FALSE(toGroupRankOrder(members, /*staticRanks=*/false));
  std::vector<std::int64_t> ids;
  for (const NodeInfo& member : members) ids.push_back(member.id);
  CHECK(ids == std::vector<std::int64_t>{3, 1, 5});

  std::vector<NodeInfo> ranked = {node(1, "a", 2), node(2, "b", 0), node(3, "c", 1)};
  CHECK_FALSE(toGroupRankOrder(ranked, /*staticRanks=*/true));
  CHECK(ranked[0].id == 2);
  CHECK(ranked[2].id == 1);

  std::vector<NodeInfo> gap = {node(1, "a", 0), node(2, "b", 2)};
  const auto problem = toGroupRankOrder(gap, /*staticRanks=*/true);
  REQUIRE(problem);
  CHECK(*problem == "node ranks of the 2 agents are not 0..1 (got 2 at place 1)");
}

}  // namespace
