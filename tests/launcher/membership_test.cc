// Membership's wire format, without a network: the store keys a job uses
// (membership/membership_keys.h) and the checks on what is read back from the store
// (roundMembersProblem, masterProblem, node records). Agents of the same version read each
// other's keys and records, and anyone who reaches a store without a token can write them, so
// both the exact strings and the refusals are what the agents rely on.
#include "membership/membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_fakes.h"
#include "core/stop_reason.h"
#include "ddprun/rendezvous/hash_store.h"
#include "membership/membership.h"
#include "membership/membership_driver.h"
#include "membership/membership_keys.h"
#include "stores/etcd_store_backend.h"
#include "stores/store_backend.h"
#include "stores/store_backends.h"

namespace {

using namespace ddprun::launcher;
using ddprun::rendezvous::HashStore;
using ddprun::rendezvous::HoldLapse;
using ddprun::test::SeverableStoreBackend;
using nlohmann::json;
using namespace std::chrono_literals;

// A key of a run, with what it belongs to.
struct LabelledKey {
  std::string key;
  int round = -1;      // the round whose key it is (-1: none)
  bool alive = false;  // a node's alive key
};

// Every key run `runId` can use, for node ids, rounds and slots up to `upTo`.
std::vector<LabelledKey> labelledKeys(const std::string& runId, int upTo) {
  const MembershipKeys keys(runId);
  std::vector<LabelledKey> all = {{keys.nextNodeId()}, {keys.currentRound()}};
  for (int i = 0; i <= upTo; ++i) {
    all.push_back({keys.node(i)});
    all.push_back({keys.alive(i), -1, true});
    for (const std::string& key :
         {keys.joined(i), keys.closed(i), keys.master(i), keys.stop(i), keys.done(i)}) {
      all.push_back({key, i});
    }
    for (int slot = 1; slot <= upTo; ++slot) all.push_back({keys.member(i, slot), i});
    for (int id = 0; id <= upTo; ++id) {
      all.push_back({keys.finished(i, id), i});
      all.push_back({keys.world(i, id), i});
      for (int member = 0; member <= upTo; ++member) all.push_back({keys.seat(i, id, member), i});
    }
  }
  return all;
}

std::vector<std::string> everyKey(const std::string& runId, int upTo) {
  std::vector<std::string> all;
  for (const LabelledKey& labelled : labelledKeys(runId, upTo)) all.push_back(labelled.key);
  return all;
}

// A c10d job of --nnodes MIN:MAX under `runId`, with the default settings.
RendezvousConfig c10dJob(int minNodes, int maxNodes, const std::string& runId) {
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.minNodes = minNodes;
  config.maxNodes = maxNodes;
  config.runId = runId;
  return config;
}

// For messages: the problem found, or "<none>".
std::string problemText(const std::optional<std::string>& problem) {
  return problem.value_or("<none>");
}

TEST_CASE("every membership key has its exact wire string", "[membership_keys]") {
  // Agents of one version must agree on these byte for byte: a changed string splits a job.
  const MembershipKeys keys("job-7");
  CHECK(kActiveRunKey == "ddprun/active_run");
  CHECK(kRendezvousKeyPrefix == "ddprun/");
  CHECK(keys.prefix() == "ddprun/job-7/");
  CHECK(keys.nextNodeId() == "ddprun/job-7/next_node_id");
  CHECK(keys.node(3) == "ddprun/job-7/node/3");
  CHECK(keys.alive(3) == "ddprun/job-7/alive/3");
  CHECK(keys.alivePrefix() == "ddprun/job-7/alive/");
  CHECK(keys.currentRound() == "ddprun/job-7/current_round");
  CHECK(keys.roundPrefix(12) == "ddprun/job-7/round/12/");
  CHECK(keys.joined(12) == "ddprun/job-7/round/12/joined");
  CHECK(keys.member(12, 4) == "ddprun/job-7/round/12/member/4");
  CHECK(keys.closed(12) == "ddprun/job-7/round/12/closed");
  CHECK(keys.world(12, 5) == "ddprun/job-7/round/12/world/5");
  CHECK(keys.seat(12, 5, 3) == "ddprun/job-7/round/12/seat/5/3");
  CHECK(keys.master(12) == "ddprun/job-7/round/12/master");
  CHECK(keys.stop(12) == "ddprun/job-7/round/12/stop");
  CHECK(keys.done(12) == "ddprun/job-7/round/12/done");
  CHECK(keys.finished(12, 3) == "ddprun/job-7/round/12/finished/3");
  CHECK(keys.finishedPrefix(12) == "ddprun/job-7/round/12/finished/");
  // Node ids are 64-bit counters.
  CHECK(keys.node(INT64_MAX) == "ddprun/job-7/node/9223372036854775807");
}

TEST_CASE("the prefixes that forget a round and wait for the alive keys cover exactly their keys",
          "[membership_keys]") {
  const MembershipKeys keys("job");
  // Forgetting round 1 deletes every key under roundPrefix(1): never round 10's or 11's.
  for (int round : {0, 1, 2, 10, 11, 12}) {
    for (const LabelledKey& labelled : labelledKeys("job", 12)) {
      INFO("round " << round << ", key " << labelled.key);
      CHECK(labelled.key.starts_with(keys.roundPrefix(round)) == (labelled.round == round));
    }
  }
  // The host's close waits for the alive keys (node 1's and node 10's alike), and only those.
  for (const LabelledKey& labelled : labelledKeys("job", 12)) {
    INFO(labelled.key);
    CHECK(labelled.key.starts_with(keys.alivePrefix()) == labelled.alive);
  }
  // Clearing the workers' keys keeps every key of the rendezvous', the active-run key included.
  CHECK(std::string_view(kActiveRunKey).starts_with(kRendezvousKeyPrefix));
  for (const std::string& key : everyKey("job", 3)) CHECK(key.starts_with(kRendezvousKeyPrefix));
}

TEST_CASE("a run id cannot reach another run's keys or the active-run key", "[membership_keys]") {
  // Run ids that extend another ("a-x", "a.x", "a_x", "a.", "a..") or name its keys' words: no
  // run's prefix (what a range or the prefix delete at a job's end covers) holds a key of another.
  const std::vector<std::string> runIds = {"a",
                                           "a-x",
                                           "a.x",
                                           "a_x",
                                           "a.",
                                           "a..",
                                           "A",
                                           "round",
                                           "node",
                                           "alive",
                                           "active_run",
                                           "none",
                                           "slurm-1234.0",
                                           "ssh-0123456789abcdef",
                                           "123e4567-e89b-12d3-a456-426614174000"};
  std::map<std::string, std::string> owner;  // key -> the run that uses it
  for (const std::string& runId : runIds) {
    const MembershipKeys keys(runId);
    CHECK(keys.prefix() == "ddprun/" + runId + "/");
    for (const std::string& key : everyKey(runId, 3)) {
      INFO("run '" << runId << "', key " << key);
      CHECK(key.starts_with(keys.prefix()));
      CHECK(key != kActiveRunKey);
      const auto [it, fresh] = owner.emplace(key, runId);
      CHECK((fresh || it->second == runId));
    }
  }
  for (const auto& [key, run] : owner) {
    for (const std::string& other : runIds) {
      if (other == run) continue;
      INFO("key " << key << " of run '" << run << "'");
      CHECK_FALSE(key.starts_with(MembershipKeys(other).prefix()));
    }
  }
  // An id that is a path or no name has no keys at all: "P/x" would live inside "P"'s prefix.
  const std::vector<std::string> bad = {"a/x", "a/round/0", "",      ".",   "..",
                                        "-a",  ".a",        "a\x1b", "a b", std::string(129, 'a')};
  for (const std::string& id : bad) {
    INFO("run '" << id << "'");
    CHECK_THROWS_AS(MembershipKeys(id), std::invalid_argument);
  }
  CHECK_NOTHROW(MembershipKeys(std::string(128, 'a')));
}

// The key table of docs/architecture.md ("Rendezvous rounds"), each name as written there.
std::set<std::string> documentedKeys() {
  std::ifstream file(std::string(DDPRUN_SOURCE_DIR) + "/docs/architecture.md");
  REQUIRE(file);
  std::set<std::string> keys;
  bool inSection = false;
  bool inTable = false;
  for (std::string line; std::getline(file, line);) {
    if (line.starts_with("### ")) inSection = line.find("Rendezvous rounds") != std::string::npos;
    if (!inSection) continue;
    if (line.starts_with("Keys live under"))
      CHECK_THAT(line, Catch::Contains("`ddprun/<run id>/`"));
    if (line.starts_with("| key |")) inTable = true;
    if (!inTable) continue;
    if (!line.starts_with("|")) break;
    const std::string firstColumn = line.substr(1, line.find('|', 1) - 1);
    static const std::regex name("`([^`]+)`");
    for (auto it = std::sregex_iterator(firstColumn.begin(), firstColumn.end(), name);
         it != std::sregex_iterator(); ++it) {
      keys.insert((*it)[1]);
    }
  }
  return keys;
}

TEST_CASE("docs/architecture.md's key table lists exactly the keys the code uses",
          "[membership_keys]") {
  // The code's keys as the table writes them: relative to the run's prefix, with placeholders.
  const MembershipKeys keys("RUN");
  const auto relative = [&](std::string key) {
    REQUIRE(key.starts_with(keys.prefix()));
    key = key.substr(keys.prefix().size());
    key = std::regex_replace(key, std::regex("9001"), "<id>");
    key = std::regex_replace(key, std::regex("9002"), "<r>");
    key = std::regex_replace(key, std::regex("9004"), "<c>");
    return std::regex_replace(key, std::regex("9003"), "<k>");
  };
  const std::set<std::string> code = {
      std::string(kActiveRunKey),         relative(keys.nextNodeId()),
      relative(keys.node(9001)),          relative(keys.alive(9001)),
      relative(keys.currentRound()),      relative(keys.joined(9002)),
      relative(keys.member(9002, 9003)),  relative(keys.closed(9002)),
      relative(keys.world(9002, 9004)),   relative(keys.seat(9002, 9004, 9001)),
      relative(keys.master(9002)),        relative(keys.stop(9002)),
      relative(keys.done(9002)),          relative(keys.status(9001)),
      relative(keys.finished(9002, 9001))};
  CHECK(documentedKeys() == code);
}

NodeInfo nodeInfo(std::int64_t id, const std::string& address, int nproc = 2, long pid = 1000,
                  int staticRank = -1) {
  NodeInfo node;
  node.id = id;
  node.address = address;
  node.hostname = "host-" + address;
  node.nproc = nproc;
  node.pid = pid;
  node.staticRank = staticRank;
  return node;
}

TEST_CASE("a job's membership writes only keys of the layout, under its run's prefix",
          "[membership_keys]") {
  // The real Membership on the in-process store: one node forms a round, publishes its workers'
  // store, passes the exit barrier. Every key it leaves is one MembershipKeys names.
  HashStore store;
  InProcessStoreBackend backend(store);
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.runId = "job.with-dots_and-dashes";
  Membership membership(config, backend, nodeInfo(-1, "10.0.0.1"),
                        [] { return std::chrono::steady_clock::now(); });
  membership.open();
  const Round round = membership.join(-1);
  REQUIRE(round.hostsWorkerStore);
  membership.publishWorkerStore(round.number, "10.0.0.1", 29512);
  membership.markDone(round.number, 1);
  const std::int64_t self = membership.self().id;

  const MembershipKeys keys(config.runId);
  const std::vector<std::string> listed = store.listKeys();
  const std::set<std::string> written(listed.begin(), listed.end());
  CHECK(written == std::set<std::string>{
                       std::string(kActiveRunKey), keys.nextNodeId(), keys.node(self),
                       keys.alive(self), keys.currentRound(), keys.joined(0), keys.member(0, 1),
                       keys.closed(0), keys.world(0, self), keys.seat(0, self, self),
                       keys.master(0), keys.stop(0), keys.done(0), keys.finished(0, self)});
  CHECK(store.get(kActiveRunKey) == config.runId);
  CHECK(store.get(keys.member(0, 1)) == std::to_string(self));
  CHECK(store.get(keys.master(0)) == "10.0.0.1:29512");
  CHECK(json::parse(store.get(keys.closed(0))) ==
        json{{"nodes", 1}, {"closer", self}, {"restarts", 0}});
  // Its seat: what it needs of the round, one small value.
  const auto seat = seatFromText(store.get(keys.seat(0, self, self)));
  REQUIRE(seat);
  CHECK(seat->closer == self);
  CHECK(seat->nodes == 1);
  CHECK(seat->groupRank == 0);
  CHECK(seat->worldSize == membership.self().nproc);
  CHECK(seat->rank0Address == "10.0.0.1");
  CHECK(seat->next.empty());
  // The world: this node's record, compact, in group-rank order (read where the list is needed).
  const auto world = worldFromText(store.get(keys.world(0, self)));
  REQUIRE(world);
  REQUIRE(world->size() == 1);
  CHECK(toJsonText(world->front()) == toJsonText(membership.self()));
  const auto stop = StopReason::parse(store.get(keys.stop(0)));
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kDone);
  membership.close(/*hostsStore=*/false);
  // Leaving gives up the holds: the next run may take the store.
  CHECK(!store.check({std::string(kActiveRunKey)}));
  CHECK(!store.check({keys.alive(self)}));
}

TEST_CASE("a node record survives the store as written", "[membership_records]") {
  const std::int64_t id = GENERATE(as<std::int64_t>{}, 0, 1, INT64_C(1) << 40);
  const int staticRank = GENERATE(-1, 0, 3);
  NodeInfo node = nodeInfo(id, "fe80::1%eth0", 8, 4194304, staticRank);
  node.hostname = "hôte-ü.example";
  const std::string text = toJsonText(node);
  // The record's field names are part of the wire format.
  const json record = json::parse(text);
  std::set<std::string> fields;
  for (const auto& [name, value] : record.items()) fields.insert(name);
  CHECK(fields ==
        std::set<std::string>{"id", "address", "hostname", "nproc", "pid", "static_rank"});
  const auto back = nodeFromJsonText(text);
  REQUIRE(back);
  CHECK(back->id == node.id);
  CHECK(back->address == node.address);
  CHECK(back->hostname == node.hostname);
  CHECK(back->nproc == node.nproc);
  CHECK(back->pid == node.pid);
  CHECK(back->staticRank == node.staticRank);
}

TEST_CASE("a host name that is not UTF-8 still makes a node record", "[membership_records]") {
  NodeInfo node = nodeInfo(3, "10.0.0.3", 2, 99, -1);
  node.hostname = "host\xff\xfe";                        // gethostname() returns bytes
  const auto back = nodeFromJsonText(toJsonText(node));  // did not throw json's type_error 316
  REQUIRE(back);
  CHECK(back->hostname == "host\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("a node record that is not one ddprun wrote is refused", "[membership_records]") {
  const std::string text = GENERATE(
      as<std::string>{},
      // not JSON, or not an object
      "", "{", "garbage", "null", "42", "\"node\"", "[]", R"([{"id": 1, "nproc": 1}])",
      R"({"id": 1, "nproc": 1} trailing)",
      // the id and nproc that make a node: missing or out of range
      R"({"address": "a", "nproc": 1})", R"({"id": -1, "address": "a", "nproc": 1})",
      R"({"id": 1, "address": "a"})", R"({"id": 1, "address": "a", "nproc": 0})",
      R"({"id": 1, "address": "a", "nproc": -4})",
      // a field of the wrong type
      R"({"id": "1", "address": "a", "nproc": 1})", R"({"id": 1, "address": 5, "nproc": 1})",
      R"({"id": 1, "address": "a", "nproc": "2"})",
      R"({"id": 1, "address": "a", "nproc": 1, "hostname": []})",
      R"({"id": 1, "address": "a", "nproc": 1, "pid": "7"})",
      R"({"id": 1, "address": "a", "nproc": 1, "static_rank": {}})",
      R"({"id": null, "address": "a", "nproc": 1})",
      // numbers that narrowing would have turned into sane ones (4294967297 -> nproc 1)
      R"({"id": 1, "address": "a", "nproc": 4294967297})",
      R"({"id": 1, "address": "a", "nproc": 65537})",
      R"({"id": 1, "address": "a", "nproc": 1, "static_rank": 4294967296})",
      R"({"id": 1, "address": "a", "nproc": 1, "static_rank": -2})");
  INFO("record: " << text);
  CHECK_FALSE(nodeFromJsonText(text));
}

TEST_CASE("a round's world survives the store as written, and one ddprun did not write is refused",
          "[membership_records]") {
  const std::vector<NodeInfo> members = {nodeInfo(4, "10.0.0.1", 8, 77, 0),
                                         nodeInfo(9, "10.0.0.2", 1, 78, 1)};
  const auto back = worldFromText(worldToText(members));
  REQUIRE(back);
  REQUIRE(back->size() == 2);
  for (std::size_t i = 0; i < members.size(); ++i)
    CHECK(toJsonText((*back)[i]) == toJsonText(members[i]));
  const auto none = worldFromText("[]");
  CHECK((none && none->empty()));
  const std::string text = GENERATE(
      as<std::string>{}, "", "[", "{}", "null", "[1]", R"([[1, 1, "a", "h", 7]])",
      R"([[1, 1, "a", "h", 7, -1, 0]])",
      // the same checks as a node record's: id, nproc (read wide), static rank, field types
      R"([[-1, 1, "a", "h", 7, -1]])", R"([[1, 0, "a", "h", 7, -1]])",
      R"([[1, 4294967297, "a", "h", 7, -1]])", R"([[1, 1, "a", "h", 7, -2]])",
      R"([[1, 1, 5, "h", 7, -1]])", R"([["1", 1, "a", "h", 7, -1]])",
      R"([[1, 1, "a", "h", 7, -1], [2, 1, "b", "h", "7", -1]])");
  INFO("world: " << text);
  CHECK_FALSE(worldFromText(text));
}

TEST_CASE("what a round's world is made of is checked before any worker starts",
          "[membership_records]") {
  const NodeInfo self = nodeInfo(2, "10.0.0.2", 4, 2222, -1);
  const std::vector<std::int64_t> ids = {1, 2, 3};
  const std::vector<NodeInfo> members = {nodeInfo(1, "10.0.0.1"), self, nodeInfo(3, "10.0.0.3")};
  REQUIRE_FALSE(roundMembersProblem(ids, members, self, 3));
  // The same for a one-node job.
  REQUIRE_FALSE(roundMembersProblem({2}, {self}, self, 1));

  struct Row {
    const char* what;
    std::vector<std::int64_t> ids;
    std::vector<NodeInfo> members;
    int maxNodes;
    std::string problem;
  };
  auto with = [&](std::size_t index, auto change) {
    std::vector<NodeInfo> changed = members;
    change(changed[index]);
    return changed;
  };
  std::vector<std::int64_t> many(65, 0);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i);
  const std::vector<Row> rows = {
      {"no members", {}, {}, 3, "0 members where the job allows 1 to 3"},
      {"more members than --nnodes MAX", ids, members, 2, "3 members where the job allows 1 to 2"},
      {"far more members than MAX", many, std::vector<NodeInfo>(65, self), 64,
       "65 members where the job allows 1 to 64"},
      {"a record missing", ids, {members[0], members[1]}, 3, "2 node records for 3 members"},
      {"the same node twice",
       {1, 2, 1},
       {members[0], self, members[0]},
       3,
       "node 1 is a member twice"},
      {"a record stored under another node's id", ids, with(2, [](NodeInfo& n) { n.id = 7; }), 3,
       "the record of node 3 says it is node 7"},
      {"no workers", ids, with(0, [](NodeInfo& n) { n.nproc = 0; }), 3, "node 1 claims 0 workers"},
      {"negative workers", ids, with(0, [](NodeInfo& n) { n.nproc = -1; }), 3,
       "node 1 claims -1 workers"},
      {"more workers than any node has", ids,
       with(2, [](NodeInfo& n) { n.nproc = kMaxNprocPerNode + 1; }), 3,
       "node 3 claims 65537 workers"},
      {"no address", ids, with(0, [](NodeInfo& n) { n.address.clear(); }), 3,
       "node 1 has no address"},
      {"this node's address forged", ids, with(1, [](NodeInfo& n) { n.address = "6.6.6.6"; }), 3,
       "this node's own record (node 2) is not what it wrote"},
      {"this node's nproc forged", ids, with(1, [](NodeInfo& n) { n.nproc = 64; }), 3,
       "this node's own record (node 2) is not what it wrote"},
      {"this node's pid forged", ids, with(1, [](NodeInfo& n) { n.pid = 1; }), 3,
       "this node's own record (node 2) is not what it wrote"},
      {"this node's node rank forged", ids, with(1, [](NodeInfo& n) { n.staticRank = 0; }), 3,
       "this node's own record (node 2) is not what it wrote"},
      {"this node left out",
       {1, 3},
       {members[0], members[2]},
       3,
       "this node (node 2) is not among the members"},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const auto problem = roundMembersProblem(row.ids, row.members, self, row.maxNodes);
    CHECK(problemText(problem) == row.problem);
  }
  // The largest nproc a record may claim is allowed.
  CHECK_FALSE(
      roundMembersProblem(ids, with(0, [](NodeInfo& n) { n.nproc = kMaxNprocPerNode; }), self, 3));
}

TEST_CASE("every member's seat: its ranks, group rank 0's address and its two ring neighbours",
          "[membership_records][seat]") {
  const std::vector<NodeInfo> members = {nodeInfo(4, "10.0.0.1", 8), nodeInfo(9, "10.0.0.2", 1),
                                         nodeInfo(2, "10.0.0.3", 2), nodeInfo(7, "10.0.0.4", 4)};
  const std::vector<Seat> seats = seatsOf(members, 9);
  REQUIRE(seats.size() == 4);
  const std::vector<int> bases = {0, 8, 9, 11};
  for (int rank = 0; rank < 4; ++rank) {
    INFO("group rank " << rank);
    const Seat& seat = seats[static_cast<std::size_t>(rank)];
    CHECK(seat.closer == 9);
    CHECK(seat.nodes == 4);
    CHECK(seat.groupRank == rank);
    CHECK(seat.baseRank == bases[static_cast<std::size_t>(rank)]);
    CHECK(seat.worldSize == 15);
    CHECK(toJsonText(seat.self) == toJsonText(members[static_cast<std::size_t>(rank)]));
    CHECK(seat.rank0Address == "10.0.0.1");
    REQUIRE(seat.next.size() == 2);
    CHECK(seat.next[0].groupRank == (rank + 1) % 4);
    CHECK(seat.next[0].id == members[static_cast<std::size_t>((rank + 1) % 4)].id);
    CHECK(seat.next[1].groupRank == (rank + 2) % 4);
    CHECK(seat.next[1].hostname == members[static_cast<std::size_t>((rank + 2) % 4)].hostname);
    // Through the store and back, exactly; and it passes its member's checks.
    const auto back = seatFromText(seatToText(seat));
    REQUIRE(back);
    CHECK(seatToText(*back) == seatToText(seat));
    CHECK(problemText(seatProblem(*back, 4, 9, members[static_cast<std::size_t>(rank)], 4,
                                  false)) == "<none>");
  }
  // Fewer nodes, fewer neighbours: none alone, one of two.
  CHECK(seatsOf({members[0]}, 4).front().next.empty());
  CHECK(seatsOf({members[0], members[1]}, 4).front().next.size() == 1);
}

TEST_CASE("a seat that is not one ddprun wrote for this node is refused",
          "[membership_records][seat]") {
  const NodeInfo self = nodeInfo(2, "10.0.0.2", 2, 1000, 1);
  const std::vector<NodeInfo> members = {nodeInfo(1, "10.0.0.1", 2, 999, 0), self,
                                         nodeInfo(3, "10.0.0.3", 2, 998, 2)};
  const Seat good = seatsOf(members, 1)[1];
  REQUIRE(problemText(seatProblem(good, 3, 1, self, 3, true)) == "<none>");
  struct Row {
    const char* what;
    std::function<void(Seat&)> change;
    int nodes;
    std::int64_t closer;
    int maxNodes;
    const char* problem;
  };
  const std::vector<Row> rows = {
      {"another closer's seat", [](Seat&) {}, 3, 5, 3,
       "written by node 1, the close record by node 5"},
      {"more members than the job allows", [](Seat& s) { s.nodes = 4; }, 4, 1, 3,
       "4 members where the job allows 1 to 3"},
      {"a count that is not the record's", [](Seat& s) { s.nodes = 2; }, 3, 1, 3,
       "counts 2 members, the close record 3"},
      {"this node's record changed", [](Seat& s) { s.self.nproc = 64; }, 3, 1, 3,
       "own record (node 2) is not what it wrote"},
      {"someone else's seat", [](Seat& s) { s.self.id = 3; }, 3, 1, 3,
       "own record (node 2) is not what it wrote"},
      {"a group rank outside the round", [](Seat& s) { s.groupRank = 3; }, 3, 1, 3,
       "group rank 3 in a round of 3 nodes"},
      {"a group rank that is not the node rank",
       [](Seat& s) {
         s.groupRank = 0;
         s.rank0Address = "10.0.0.2";
       },
       3, 1, 3, "group rank 0 for node rank 1"},
      {"ranks past the world", [](Seat& s) { s.baseRank = 5; }, 3, 1, 3,
       "ranks 5..6 of a world of 6"},
      {"a world larger than the nodes can hold",
       [](Seat& s) { s.worldSize = 3 * kMaxNprocPerNode + 1; }, 3, 1, 3, "of a world of"},
      {"no address for group rank 0", [](Seat& s) { s.rank0Address.clear(); }, 3, 1, 3,
       "group rank 0 has no address"},
      {"a neighbour that is this node", [](Seat& s) { s.next[0].id = 2; }, 3, 1, 3,
       "a neighbour at group rank 2 (node 2)"},
      {"a neighbour outside the round", [](Seat& s) { s.next[1].groupRank = 7; }, 3, 1, 3,
       "a neighbour at group rank 7"},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    Seat seat = good;
    row.change(seat);
    CHECK_THAT(problemText(seatProblem(seat, row.nodes, row.closer, self, row.maxNodes, true)),
               Catch::Contains(row.problem));
  }
  // Group rank 0 must be where its own address says.
  Seat first = seatsOf(members, 1)[0];
  first.rank0Address = "0.0.0.0";
  CHECK_THAT(problemText(seatProblem(first, 3, 1, members[0], 3, false)),
             Catch::Contains("is not this node's"));
  // Text that is not a seat.
  for (const char* text : {"", "[]", "{}", R"({"closer":1})", "not json"}) {
    INFO(text);
    CHECK_FALSE(seatFromText(text).has_value());
  }
  json withNproc0 = json::parse(seatToText(good));
  withNproc0["self"][1] = 0;
  CHECK_FALSE(seatFromText(withNproc0.dump()).has_value());
  json manyNext = json::parse(seatToText(good));
  manyNext["next"].push_back(json::array({0, 1, "x"}));
  CHECK_FALSE(seatFromText(manyNext.dump()).has_value());
}

TEST_CASE("a round's worker store is host:port on group rank 0's address", "[membership_records]") {
  struct Row {
    std::string master;
    std::string expectedHost;
    std::optional<std::string> problem;  // nothing: accepted
  };
  const Row row = GENERATE(
      Row{"10.0.0.1:29512", "", std::nullopt}, Row{"10.0.0.1:29512", "10.0.0.1", std::nullopt},
      Row{"node-a.example:1", "", std::nullopt}, Row{"10.0.0.1:65535", "", std::nullopt},
      Row{"10.0.0.1:00080", "10.0.0.1", std::nullopt},
      // IPv6 as the agents publish it: the address, ':' and the port (the last ':' splits).
      Row{"fe80::1:29512", "fe80::1", std::nullopt},
      Row{"10.0.0.1", "", "\"10.0.0.1\" is not host:port"},
      Row{":29512", "", "\":29512\" is not host:port"}, Row{"", "", "\"\" is not host:port"},
      Row{"10.0.0.1:", "", "\"10.0.0.1:\" has no port in 1..65535"},
      Row{"10.0.0.1:0", "", "\"10.0.0.1:0\" has no port in 1..65535"},
      Row{"10.0.0.1:65536", "", "\"10.0.0.1:65536\" has no port in 1..65535"},
      Row{"10.0.0.1:-1", "", "\"10.0.0.1:-1\" has no port in 1..65535"},
      Row{"10.0.0.1:+80", "", "\"10.0.0.1:+80\" has no port in 1..65535"},
      Row{"10.0.0.1: 80", "", "\"10.0.0.1: 80\" has no port in 1..65535"},
      Row{"10.0.0.1:80x", "", "\"10.0.0.1:80x\" has no port in 1..65535"},
      Row{"10.0.0.1:99999999999999999999", "",
          "\"10.0.0.1:99999999999999999999\" has no port in 1..65535"},
      // Somebody else's machine: the workers would connect there.
      Row{"6.6.6.6:29512", "10.0.0.1",
          "\"6.6.6.6:29512\" is not on group rank 0's address 10.0.0.1"},
      Row{"10.0.0.10:29512", "10.0.0.1",
          "\"10.0.0.10:29512\" is not on group rank 0's address 10.0.0.1"});
  INFO("master \"" << row.master << "\", expected host \"" << row.expectedHost << "\"");
  CHECK(problemText(masterProblem(row.master, row.expectedHost)) == problemText(row.problem));
}

TEST_CASE("a problem quotes at most 200 bytes of what the store held", "[membership_records]") {
  // The line goes to the user's terminal: a forged megabyte must not.
  const std::string huge(1 << 20, 'x');
  const auto problem = masterProblem(huge, "");
  REQUIRE(problem);
  CHECK(problem->size() < 250);
  CHECK(masterProblem(huge + ":0", "")->size() < 250);
}

// --- The store seam: what differs between stores is asked of the backend (store_backend.h).

Membership::Now steadyNow() {
  return [] { return std::chrono::steady_clock::now(); };
}

// A one-node job through a whole round: open, join, publish, pass the exit barrier.
void runOneNodeJob(Membership& membership) {
  membership.open();
  const Round round = membership.join(-1);
  REQUIRE(round.hostsWorkerStore);
  membership.publishWorkerStore(round.number, "10.0.0.1", 29512);
  membership.markDone(round.number, 1);
}

TEST_CASE("on a shared store two runs side by side each keep to their prefix and claim nothing",
          "[membership][tenancy]") {
  // An etcd a cluster shares: run ids are jobs, and a job never sees another's keys.
  HashStore store;
  InProcessStoreBackend backend(store, StoreTenancy::kShared);
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.runId = "job-a";
  Membership a(config, backend, nodeInfo(-1, "10.0.0.1"), steadyNow());
  config.runId = "job-b";
  Membership b(config, backend, nodeInfo(-1, "10.0.0.2"), steadyNow());
  runOneNodeJob(a);
  runOneNodeJob(b);  // not refused: the store is not job-a's
  CHECK_FALSE(store.check({std::string(kActiveRunKey)}));
  for (const std::string& key : store.listKeys()) {
    INFO(key);
    CHECK((key.starts_with(MembershipKeys("job-a").prefix()) ||
           key.starts_with(MembershipKeys("job-b").prefix())));
  }
  // Each formed its own round 0 with itself alone.
  const auto closedA = json::parse(store.get(MembershipKeys("job-a").closed(0)));
  const auto closedB = json::parse(store.get(MembershipKeys("job-b").closed(0)));
  CHECK(closedA == json{{"nodes", 1}, {"closer", a.self().id}, {"restarts", 0}});
  CHECK(closedB == json{{"nodes", 1}, {"closer", b.self().id}, {"restarts", 0}});
  a.close(/*hostsStore=*/false);
  b.close(/*hostsStore=*/false);
}

TEST_CASE("on a store that is one job's, an agent of another run is refused",
          "[membership][tenancy]") {
  HashStore store;
  InProcessStoreBackend backend(store);  // kOneJob: ddprun's own store
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.runId = "job-a";
  Membership a(config, backend, nodeInfo(-1, "10.0.0.1"), steadyNow());
  a.open();
  CHECK(store.get(kActiveRunKey) == "job-a");
  config.runId = "job-b";
  Membership b(config, backend, nodeInfo(-1, "10.0.0.2"), steadyNow());
  CHECK_THROWS_WITH(b.open(),
                    Catch::Contains("belongs to run 'job-a'") && Catch::Contains("job-b"));
  a.close(/*hostsStore=*/false);
  CHECK_FALSE(store.check({std::string(kActiveRunKey)}));  // the next run may take the store
}

// Two agents of one elastic job in round 0, each on a backend of its own over `store` (sever()
// makes one vanish as kill -9 would).
struct TwoNodes {
  explicit TwoNodes(HashStore& store) : backendA(store), backendB(store) {
    config.backend = RdzvBackend::kC10d;
    config.minNodes = 2;
    config.maxNodes = 2;
    config.runId = "pair";
    a = std::make_unique<Membership>(config, backendA, nodeInfo(-1, "10.0.0.1"), steadyNow());
    b = std::make_unique<Membership>(config, backendB, nodeInfo(-1, "10.0.0.2"), steadyNow());
    a->open();
    b->open();
    // Group rank 0 publishes its workers' store, which the other waits for.
    const auto join = [](Membership& node, Round& round, std::string& error) {
      try {
        round = node.join(-1);
        if (round.hostsWorkerStore)
          node.publishWorkerStore(round.number, node.self().address, 29512);
      } catch (const std::exception& e) {
        error = e.what();
      }
    };
    std::string errorB;
    std::thread joinB([&] { join(*b, roundB, errorB); });
    std::string errorA;
    join(*a, roundA, errorA);
    joinB.join();
    REQUIRE(errorA.empty());
    REQUIRE(errorB.empty());
    REQUIRE(roundA.number == 0);
    REQUIRE(roundB.number == 0);
  }
  RendezvousConfig config;
  SeverableStoreBackend backendA;
  SeverableStoreBackend backendB;
  std::unique_ptr<Membership> a;
  std::unique_ptr<Membership> b;
  Round roundA;
  Round roundB;
};

TEST_CASE("a lost node stops the round whether the store reports it or only deletes its key",
          "[membership][hold_lapse]") {
  // ddprun's store writes a lapsed hold's notice itself; an etcd only deletes the leased key,
  // and the peers write the notice (LapseReporter). Either way the others wake on the same stop.
  const HoldLapse lapse = GENERATE(HoldLapse::kStoreNotifies, HoldLapse::kKeyDeletedOnly);
  INFO((lapse == HoldLapse::kStoreNotifies ? "the store notifies" : "the store only deletes"));
  HashStore store({}, lapse);
  TwoNodes nodes(store);
  std::optional<StopReason> seen;
  std::thread watching([&] { seen = nodes.a->waitForStop(0); });
  const auto severed = std::chrono::steady_clock::now();
  nodes.backendB.sever();  // B vanishes: its connections close without giving up their holds
  watching.join();
  CHECK(std::chrono::steady_clock::now() - severed < 3s);  // the close, not the 5 s hold lifetime
  REQUIRE(seen);
  CHECK(seen->kind == StopKind::kNodeLost);
  CHECK(seen->node == nodes.b->self().id);
  CHECK(seen->groupRank == nodes.roundB.groupRank);
  CHECK(seen->host == "host-10.0.0.2");
  // The record is exactly the one the store would have written for B.
  const StopReason expected =
      StopReason::nodeLost(nodes.b->self().id, nodes.roundB.groupRank, "host-10.0.0.2");
  CHECK(store.get(MembershipKeys("pair").stop(0)) == expected.serialize());
}

TEST_CASE("where the peers report lost nodes, one that leaves after the round stopped is no news",
          "[membership][hold_lapse]") {
  HashStore store({}, HoldLapse::kKeyDeletedOnly);
  TwoNodes nodes(store);
  const StopReason left =
      StopReason::nodeLeft(nodes.b->self().id, nodes.roundB.groupRank, "host-10.0.0.2", 15);
  nodes.b->announce(0, left);
  nodes.b->close(/*hostsStore=*/false);                         // its alive key goes quietly
  std::this_thread::sleep_for(LapseReporter::kWatchSlice * 2);  // A's reporter has seen it go
  CHECK(store.get(MembershipKeys("pair").stop(0)) == left.serialize());  // create-if-absent kept it
  CHECK(nodes.a->waitForStop(0).kind == StopKind::kNodeLeft);
}

TEST_CASE(
    "a job of more than 64 nodes forms, loses a node and re-forms, every member agreeing on "
    "the world",
    "[membership][scale]") {
  // Above kNamedJoinersMax (64) only the deciding joiners read the whole list, each member asks
  // and (where the peers report lapses) watches only its ring neighbours, and every member reads
  // the round's world instead of the node records: the same rounds must come out.
  const HoldLapse lapse = GENERATE(HoldLapse::kStoreNotifies, HoldLapse::kKeyDeletedOnly);
  INFO((lapse == HoldLapse::kStoreNotifies ? "the store notifies" : "the store only deletes"));
  constexpr int kNodes = 70;
  HashStore store({}, lapse);
  RendezvousConfig config = c10dJob(kNodes - 1, kNodes, "big");
  // The vanished node's heartbeat gives up on its severed link soon (a 5 s call timeout otherwise).
  config.settings.heartbeatTimeout = 500ms;
  std::vector<std::unique_ptr<SeverableStoreBackend>> backends;
  std::vector<std::unique_ptr<Membership>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    backends.push_back(std::make_unique<SeverableStoreBackend>(store));
    nodes.push_back(std::make_unique<Membership>(
        config, *backends.back(), nodeInfo(-1, fmt::format("10.0.{}.{}", i % 3, i), 1 + i % 4),
        steadyNow()));
    nodes.back()->open();
  }
  // All join round `number` at once (those in `who`); each gets its round or an error.
  const auto joinAll = [&](const std::vector<int>& who, int number) {
    std::vector<Round> rounds(kNodes);
    std::vector<std::string> errors(kNodes);
    std::vector<std::thread> threads;
    for (int i : who) {
      threads.emplace_back([&, i] {
        try {
          rounds[i] = nodes[i]->join(number);
          if (rounds[i].hostsWorkerStore)
            nodes[i]->publishWorkerStore(rounds[i].number, nodes[i]->self().address, 29512);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (int i : who) {
      INFO("node " << i);
      REQUIRE(errors[i].empty());
      CHECK(rounds[i].number == number);
    }
    return rounds;
  };
  const auto agree = [&](const std::vector<Round>& rounds, const std::vector<int>& who) {
    const Round& first = rounds[who.front()];
    std::set<int> groupRanks;
    for (int i : who) {
      INFO("node " << i);
      CHECK(rounds[i].nodes == static_cast<int>(who.size()));
      CHECK(rounds[i].address == nodes[i]->self().address);
      CHECK(rounds[i].worldSize == first.worldSize);
      if (!rounds[i].hostsWorkerStore) CHECK(rounds[i].masterPort == 29512);
      groupRanks.insert(rounds[i].groupRank);
    }
    CHECK(static_cast<int>(groupRanks.size()) == static_cast<int>(who.size()));
    CHECK(*groupRanks.rbegin() == static_cast<int>(who.size()) - 1);
    // The base ranks tile the world in group-rank order: each node's after the ones before it.
    std::vector<int> byRank(who.size());
    for (int i : who) byRank[static_cast<std::size_t>(rounds[i].groupRank)] = i;
    int base = 0;
    for (int i : byRank) {
      CHECK(rounds[i].baseRank == base);
      base += nodes[i]->self().nproc;
    }
    CHECK(base == first.worldSize);
  };
  std::vector<int> everyone(kNodes);
  for (int i = 0; i < kNodes; ++i) everyone[i] = i;
  const std::vector<Round> first = joinAll(everyone, 0);
  agree(first, everyone);
  const MembershipKeys keys("big");
  const auto closer = json::parse(store.get(keys.closed(0))).at("closer").get<std::int64_t>();
  const auto world = worldFromText(store.get(keys.world(0, closer)));
  REQUIRE(world);
  CHECK(world->size() == kNodes);

  // The last group rank vanishes (kill -9): its ring predecessors, or the store, report it.
  int lost = 0;
  for (int i = 0; i < kNodes; ++i) {
    if (first[i].groupRank == kNodes - 1) lost = i;
  }
  std::vector<int> survivors;
  for (int i = 0; i < kNodes; ++i) {
    if (i != lost) survivors.push_back(i);
  }
  backends[lost]->sever();
  const StopReason stop = nodes[survivors.front()]->waitForStop(0);
  CHECK(stop.kind == StopKind::kNodeLost);
  CHECK(stop.node == nodes[lost]->self().id);
  const std::vector<Round> second = joinAll(survivors, 1);
  agree(second, survivors);
  // At once, as separate agents would (each LapseReporter ends within its watch slice).
  std::vector<std::thread> closing;
  for (int i : survivors) closing.emplace_back([&, i] { nodes[i]->close(/*hostsStore=*/false); });
  for (auto& thread : closing) thread.join();
}

namespace {

// A backend whose connections count the bytes of the values they read (get, tryGet, multiGet,
// compareSet's answer) and the requests they make: what one member costs the store.
class ReadCountingBackend final : public StoreBackend {
 public:
  explicit ReadCountingBackend(HashStore& store) : inner_(store) {}
  std::unique_ptr<ddprun::rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) override {
    return std::make_unique<Connection>(inner_.connect(callTimeout, connectTimeout), *this);
  }
  std::string address() const override { return inner_.address(); }
  StoreTenancy tenancy() const override { return inner_.tenancy(); }
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::size_t> requests{0};
  std::atomic<std::size_t> reads{0};  // tryGet and ticketCount: a waiting joiner's polls
  std::atomic<std::size_t> waits{0};

 private:
  // Counts every request it forwards; the others (append, listKeys, barrier) Membership never
  // makes.
  class Connection final : public ddprun::test::ForwardingStore {
   public:
    using Forwarding = ddprun::test::ForwardingStore;
    Connection(std::unique_ptr<ddprun::rendezvous::HoldingStore> inner, ReadCountingBackend& counts)
        : Forwarding(std::move(inner)), counts_(counts) {}
    void set(std::string_view k, std::string_view v) override {
      count(0);
      Forwarding::set(k, v);
    }
    std::string get(std::string_view k) override { return read(Forwarding::get(k)); }
    std::optional<std::string> tryGet(std::string_view k) override {
      auto value = Forwarding::tryGet(k);
      count(value ? value->size() : 0);
      counts_.reads.fetch_add(1);
      return value;
    }
    std::int64_t add(std::string_view k, std::int64_t d) override {
      count(0);
      return Forwarding::add(k, d);
    }
    std::int64_t takeTicket(std::string_view k) override {
      count(0);
      return Forwarding::takeTicket(k);
    }
    std::int64_t ticketCount(std::string_view k) override {
      count(0);
      counts_.reads.fetch_add(1);
      return Forwarding::ticketCount(k);
    }
    std::string compareSet(std::string_view k, std::string_view e, std::string_view d) override {
      return read(Forwarding::compareSet(k, e, d));
    }
    void wait(const std::vector<std::string>& keys, Duration timeout) override {
      count(0);
      counts_.waits.fetch_add(1);
      Forwarding::wait(keys, timeout);
    }
    using Store::wait;
    bool check(const std::vector<std::string>& keys) override {
      count(0);
      return Forwarding::check(keys);
    }
    bool deleteKey(std::string_view k) override {
      count(0);
      return Forwarding::deleteKey(k);
    }
    std::int64_t numKeys() override {
      count(0);
      return Forwarding::numKeys();
    }
    std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
      std::vector<std::string> values = Forwarding::multiGet(keys);
      std::size_t total = 0;
      for (const std::string& value : values) total += value.size();
      count(total);
      return values;
    }
    void multiSet(const std::vector<std::string>& keys,
                  const std::vector<std::string>& values) override {
      count(0);
      Forwarding::multiSet(keys, values);
    }
    ddprun::rendezvous::ListedKeys listPrefix(std::string_view p, std::size_t n) override {
      count(0);
      return Forwarding::listPrefix(p, n);
    }
    std::int64_t deletePrefix(std::string_view p) override {
      count(0);
      return Forwarding::deletePrefix(p);
    }
    std::string hold(std::string_view k, std::string_view v, std::chrono::milliseconds ttl,
                     std::string_view nk, std::string_view nv) override {
      count(0);
      return Forwarding::hold(k, v, ttl, nk, nv);
    }
    bool release(std::string_view k) override {
      count(0);
      return Forwarding::release(k);
    }
    std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                               Duration timeout) override {
      count(0);
      return Forwarding::waitForAnyMissing(keys, timeout);
    }

   private:
    void count(std::size_t bytes) {
      counts_.requests.fetch_add(1);
      counts_.bytes.fetch_add(bytes);
    }
    std::string read(std::string value) {
      count(value.size());
      return value;
    }
    ReadCountingBackend& counts_;
  };
  InProcessStoreBackend inner_;
};

// The bytes of values the typical member of a job of `count` nodes reads to form round 0 (the
// median: the deciding joiners read the list of joiners, O(N), as they must).
std::size_t medianBytesToForm(int count) {
  HashStore store;
  RendezvousConfig config = c10dJob(count, count, "count");
  std::vector<std::unique_ptr<ReadCountingBackend>> backends;
  std::vector<std::unique_ptr<Membership>> nodes;
  for (int i = 0; i < count; ++i) {
    backends.push_back(std::make_unique<ReadCountingBackend>(store));
    nodes.push_back(std::make_unique<Membership>(
        config, *backends.back(), nodeInfo(-1, fmt::format("10.1.{}.{}", i / 200, i % 200), 2),
        steadyNow()));
    nodes.back()->open();
  }
  std::vector<std::size_t> before(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    before[static_cast<std::size_t>(i)] = backends[static_cast<std::size_t>(i)]->bytes.load();
  std::vector<std::string> errors(static_cast<std::size_t>(count));
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        const Round round = nodes[static_cast<std::size_t>(i)]->join(0);
        if (round.hostsWorkerStore)
          nodes[static_cast<std::size_t>(i)]->publishWorkerStore(0, "10.1.0.0", 29512);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const std::string& error : errors) REQUIRE(error.empty());
  std::vector<std::size_t> read;
  for (int i = 0; i < count; ++i) {
    read.push_back(backends[static_cast<std::size_t>(i)]->bytes.load() -
                   before[static_cast<std::size_t>(i)]);
  }
  std::sort(read.begin(), read.end());
  std::vector<std::thread> closing;
  for (auto& node : nodes) closing.emplace_back([&node] { node->close(/*hostsStore=*/false); });
  for (auto& thread : closing) thread.join();
  return read[read.size() / 2];
}

}  // namespace

TEST_CASE(
    "a member reads its seat, not the world: the bytes it reads to form a round do not grow "
    "with the job",
    "[membership][scale][seat]") {
  // Above kNamedJoinersMax a member reads its own seat (O(1) bytes) and the close record (a
  // count), never the N records of the world: twice the nodes, the same bytes per member (the
  // world alone is ~45 bytes a node: 3 KB at 65 nodes, 6 KB at 130).
  const std::size_t small = medianBytesToForm(65);
  const std::size_t big = medianBytesToForm(130);
  INFO("median bytes read per member: " << small << " at 65 nodes, " << big << " at 130");
  CHECK(big < small + small / 4);
  CHECK(big < 1500);
}

TEST_CASE(
    "a big job's joiner that can no longer decide only waits for the close between its slow "
    "reads",
    "[membership][scale]") {
  // Thousands of joiners wait while a big round forms; each one's polls are the store's load for
  // that whole time. Above kNamedJoinersMax a joiner whose slot is neither the latest nor MIN's
  // cannot close the round, so between its line's passes (every 10 s) it neither reads the
  // counter nor re-reads the close key its timed-out wait has just seen absent: one wait a second.
  constexpr int kNodes = 66;
  HashStore store;
  RendezvousConfig config = c10dJob(kNodes, kNodes, "bystander");
  const MembershipKeys keys("bystander");
  std::vector<std::unique_ptr<ReadCountingBackend>> backends;
  std::vector<std::unique_ptr<Membership>> nodes;
  std::vector<std::thread> joiners;
  std::vector<std::string> errors(3);
  for (int i = 0; i < 3; ++i) {
    backends.push_back(std::make_unique<ReadCountingBackend>(store));
    nodes.push_back(std::make_unique<Membership>(
        config, *backends.back(), nodeInfo(-1, fmt::format("10.2.0.{}", i)), steadyNow()));
    nodes.back()->open();
  }
  // One after the other, so that node 0 holds slot 1 and node 2 the latest slot.
  for (int i = 0; i < 3; ++i) {
    joiners.emplace_back([&, i] {
      try {
        nodes[static_cast<std::size_t>(i)]->join(0);
        errors[static_cast<std::size_t>(i)] = "the round closed with 3 of 66 nodes";
      } catch (const MembershipCancelled&) {
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (store.ticketCount(keys.joined(0)) < i + 1 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(store.ticketCount(keys.joined(0)) == i + 1);
  }
  std::this_thread::sleep_for(1200ms);  // node 0's pass that saw slot 3 taken is over
  const std::size_t readsBefore = backends[0]->reads.load();
  const std::size_t waitsBefore = backends[0]->waits.load();
  const std::size_t latestReadsBefore = backends[2]->reads.load();
  std::this_thread::sleep_for(2500ms);
  const std::size_t reads = backends[0]->reads.load() - readsBefore;
  const std::size_t waits = backends[0]->waits.load() - waitsBefore;
  const std::size_t latestReads = backends[2]->reads.load() - latestReadsBefore;
  for (auto& node : nodes) node->cancel();
  for (auto& joiner : joiners) joiner.join();
  for (const std::string& error : errors) CHECK(error.empty());
  INFO("in 2.5 s the bystander made " << reads << " reads and " << waits
                                      << " waits; the latest joiner " << latestReads << " reads");
  CHECK(reads == 0);
  CHECK(waits >= 2);
  CHECK(waits <= 3);
  // The latest joiner still decides (its arrival or the next may complete the round): it polls.
  CHECK(latestReads >= 4);
  for (auto& node : nodes) node->close(/*hostsStore=*/false);
}

TEST_CASE(
    "a closer that cannot read a member's record writes no seats, and every member names "
    "the bad record",
    "[membership][seat]") {
  // A forged node record (nproc 0): the closer falls back to naming the members' ids, and each
  // member reads the records and refuses the round, as before seats (security: nproc-zero).
  HashStore store;
  InProcessStoreBackend backend(store);
  RendezvousConfig config = c10dJob(2, 2, "forged");
  Membership a(config, backend, nodeInfo(-1, "10.0.0.1"), steadyNow());
  Membership b(config, backend, nodeInfo(-1, "10.0.0.2"), steadyNow());
  a.open();
  b.open();
  const MembershipKeys keys("forged");
  json forged = json::parse(store.get(keys.node(b.self().id)));
  forged["nproc"] = 0;
  store.set(keys.node(b.self().id), forged.dump());
  std::string errorA;
  std::thread joinA([&] {
    try {
      a.join(0);
    } catch (const MembershipError& e) {
      errorA = e.what();
    }
  });
  std::string errorB;
  try {
    b.join(0);
  } catch (const MembershipError& e) {
    errorB = e.what();
  }
  joinA.join();
  CHECK_THAT(errorA, Catch::Contains("a node record in the store is malformed"));
  CHECK_THAT(errorB, Catch::Contains("a node record in the store is malformed"));
  const json closed = json::parse(store.get(keys.closed(0)));
  CHECK(closed.contains("members"));
  CHECK_FALSE(closed.contains("closer"));
  CHECK(store.listPrefix(keys.roundPrefix(0) + "seat/", 10).keys.empty());
  a.close(false);
  b.close(false);
}

TEST_CASE("a round forgets round r-2 with one prefix delete, and only it", "[membership][prefix]") {
  HashStore store;
  InProcessStoreBackend backend(store);
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.runId = "job";
  Membership membership(config, backend, nodeInfo(-1, "10.0.0.1"), steadyNow());
  membership.open();
  const MembershipKeys keys(config.runId);
  store.set(keys.prefix() + "round/10/unrelated", "x");  // round 1's prefix must not reach round 10
  for (int round = 0; round <= 3; ++round) {
    const Round formed = membership.join(round);
    REQUIRE(formed.number == round);
    membership.publishWorkerStore(round, "10.0.0.1", 29512);
    if (round < 3) membership.announce(round, StopReason::nodeJoined(99, "late"));
  }
  CHECK_FALSE(store.listPrefix(keys.roundPrefix(0), 0).more);
  CHECK_FALSE(store.listPrefix(keys.roundPrefix(1), 0).more);
  CHECK(store.check({keys.closed(2), keys.closed(3), keys.prefix() + "round/10/unrelated"}));
  membership.close(/*hostsStore=*/true, 0ms);
}

TEST_CASE("the backend factory: one entry per --rdzv-backend", "[membership][factory]") {
  RendezvousConfig config;
  StoreBackendInputs inputs;
  inputs.ddprunStore.host = "10.1.2.3";
  inputs.ddprunStore.port = 29400;
  for (const RdzvBackend kind : {RdzvBackend::kStatic, RdzvBackend::kC10d}) {
    config.backend = kind;
    const std::unique_ptr<StoreBackend> backend =
        makeStoreBackend(config, inputs);  // connects nothing
    REQUIRE(backend);
    CHECK(backend->address() == "10.1.2.3:29400");
    CHECK(backend->tenancy() == StoreTenancy::kOneJob);
    // Both are ddprun's store, which the static workers can share.
    REQUIRE(backend->staticFacet() != nullptr);
    CHECK(backend->staticFacet()->masterAddress() == "10.1.2.3:29400");
  }
}

TEST_CASE("the backend factory: etcd is a shared store on its members, with no static facet",
          "[membership][factory][etcd]") {
  RendezvousConfig config;
  config.backend = RdzvBackend::kEtcd;
  config.etcdEndpoints =
      ddprun::rendezvous::etcd::parseEtcdEndpoints("10.1.2.3,https://10.1.2.4:2380");
  const std::unique_ptr<StoreBackend> backend = makeStoreBackend(config, {});  // connects nothing
  REQUIRE(backend);
  CHECK(backend->address() == "http://10.1.2.3:2379,https://10.1.2.4:2380");
  CHECK(backend->tenancy() == StoreTenancy::kShared);
  CHECK(backend->staticFacet() == nullptr);
  CHECK_THAT(backend->unreachableFix(), Catch::Contains("check that etcd runs there"));
  // etcd_prefix: every key of the job under it, one slash between.
  CHECK(etcdKeyPrefix("") == "/");
  CHECK(etcdKeyPrefix("/") == "/");
  CHECK(etcdKeyPrefix("/torchelastic/p2p") == "/torchelastic/p2p/");
  CHECK(etcdKeyPrefix("jobs//") == "jobs/");
  // How the client is made: the members, read_timeout as a call's deadline, the https files.
  config.settings.readTimeout = std::chrono::seconds(7);
  config.settings.etcdCaCert = "/ca.pem";
  config.settings.etcdCert = "/c.pem";
  config.settings.etcdKey = "/k.pem";
  const auto options = etcdClientOptions(config);
  CHECK(options.endpoints == config.etcdEndpoints);
  CHECK(options.timeout == std::chrono::seconds(7));
  CHECK(options.tls.caCertificate == "/ca.pem");
  CHECK(options.tls.certificate == "/c.pem");
  CHECK(options.tls.privateKey == "/k.pem");
  config.settings.etcdCert.clear();
  config.settings.etcdKey.clear();
  // A certificate file that cannot be used: one line naming it, before anything starts.
  config.settings.etcdCaCert = "/nonexistent/ca.pem";
  CHECK_THROWS_AS(makeStoreBackend(config, {}), StoreBackendError);
}

TEST_CASE("on a shared store the last agent out removes its run's keys, and only them",
          "[membership][tenancy]") {
  HashStore store;
  InProcessStoreBackend backend(store, StoreTenancy::kShared);
  store.set("ddprun/other-run/node/0", "another job's");
  RendezvousConfig config = c10dJob(1, 2, "job-a");
  Membership a(config, backend, nodeInfo(-1, "10.0.0.1"), steadyNow());
  Membership b(config, backend, nodeInfo(-1, "10.0.0.2"), steadyNow());
  a.open();
  b.open();
  const std::string prefix = MembershipKeys("job-a").prefix();
  a.close(/*hostsStore=*/false);
  CHECK(store.listPrefix(prefix, 0).more);  // b is still there
  b.close(/*hostsStore=*/false);
  CHECK_FALSE(store.listPrefix(prefix, 0).more);
  CHECK(store.get("ddprun/other-run/node/0") == "another job's");
}

TEST_CASE("a static job needs a backend with the static facet", "[membership][factory]") {
  HashStore store;
  SeverableStoreBackend noFacet(store);  // a backend with no StaticStoreFacet, as an etcd's
  RendezvousConfig config;
  config.backend = RdzvBackend::kStatic;
  CHECK_THROWS_AS(Membership(config, noFacet, nodeInfo(-1, "10.0.0.1"), steadyNow()),
                  std::invalid_argument);
  config.backend = RdzvBackend::kC10d;
  CHECK_NOTHROW(Membership(config, noFacet, nodeInfo(-1, "10.0.0.1"), steadyNow()));
}

}  // namespace

// --- Liveness and fencing (docs/architecture.md): the fence counts from the send of the last
// acknowledged renewal, a late acknowledgement changes nothing once fenced, and a round the job
// has left takes no more writes (the fencing token).

// A clock the test moves; the store's holds age on it too.
struct ManualClock {
  std::atomic<std::int64_t> ms{1'000'000};
  Membership::Now now() {
    return [this] {
      return std::chrono::steady_clock::time_point(std::chrono::milliseconds(ms.load()));
    };
  }
  std::chrono::steady_clock::time_point at(std::int64_t t) const {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(t));
  }
};

// Waits (real time, bounded) until the backend's network holds `count` renewals.
bool renewalsBlocked(const SeverableStoreBackend& backend, int count) {
  for (int i = 0; i < 400 && backend.blockedHolds() < count; ++i) std::this_thread::sleep_for(5ms);
  return backend.blockedHolds() >= count;
}

TEST_CASE(
    "the fence counts from the send of the last acknowledged renewal, not from the last "
    "attempt, and a late acknowledgement does not un-fence",
    "[membership][fencing]") {
  ManualClock clock;
  HashStore store(clock.now());
  SeverableStoreBackend backend(store);
  RendezvousConfig config;
  config.backend = RdzvBackend::kC10d;
  config.runId = "fence";
  config.settings.keepAliveInterval = 200ms;  // renewals every 200 ms of real time
  config.settings.keepAliveMaxAttempts = 25;  // T = 5 s of the manual clock, F = 4.5 s
  REQUIRE(config.settings.fencingInterval() == 4500ms);
  Membership node(config, backend, nodeInfo(-1, "10.0.0.1"), clock.now());
  node.open();
  const std::int64_t opened = clock.ms.load();
  REQUIRE(node.livenessAcknowledgedAt() == clock.at(opened));
  const Round round = node.join(-1);
  node.publishWorkerStore(round.number, "10.0.0.1", 29512);

  // The network goes; a renewal is sent 1 s later and waits on it.
  backend.silence();
  const auto acknowledged = node.livenessAcknowledgedAt();
  REQUIRE(acknowledged);
  clock.ms += 1000;
  REQUIRE(renewalsBlocked(backend, 1));  // sent at the cut's start or 1 s in
  // The attempt moves nothing: the fence still counts from the last acknowledged send.
  CHECK(node.livenessAcknowledgedAt() == acknowledged);

  // Acknowledged 2 s later: it counts from its send (1 s after the cut's start), not its reply.
  const std::int64_t sent = clock.ms.load();
  clock.ms += 2000;
  backend.heal();
  for (int i = 0; i < 20 && backend.blockedHolds() > 0; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(
      20ms);  // the acknowledged renewal is recorded (the next is 200 ms off)
  CHECK(node.livenessAcknowledgedAt() <= clock.at(sent));  // its send, not the reply's 2 s later
  CHECK(node.livenessAcknowledgedAt() >= acknowledged);

  // Cut again: a renewal waits; the node is fenced off round 0; then the renewal is acknowledged.
  // A renewal at the present time is acknowledged (one every 200 ms of real time); right after it,
  // the network goes again and the clock moves on, so the next renewal is sent later than it.
  const std::int64_t healedAt = clock.ms.load();
  for (int i = 0; i < 400 && node.livenessAcknowledgedAt() != clock.at(healedAt); ++i)
    std::this_thread::sleep_for(2ms);
  REQUIRE(node.livenessAcknowledgedAt() == clock.at(healedAt));
  backend.silence();
  clock.ms += 1000;
  const std::int64_t late = clock.ms.load();
  REQUIRE(renewalsBlocked(backend, 1));
  clock.ms += 1000;
  REQUIRE(renewalsBlocked(backend, 1));  // the one sent at `late` (at the latest) still waits
  node.fence(round.number);
  const auto atFence = node.livenessAcknowledgedAt();
  backend.heal();
  for (int i = 0; i < 400 && node.livenessAcknowledgedAt() == atFence; ++i)
    std::this_thread::sleep_for(5ms);
  CHECK(node.livenessAcknowledgedAt() == clock.at(late));  // acknowledged, late, from its send
  CHECK(node.fenced(round.number));                        // and still fenced
  // No renewal after the fence: the acknowledged time stays where the late one put it.
  const auto last = node.livenessAcknowledgedAt();
  clock.ms += 1000;
  std::this_thread::sleep_for(600ms);  // three keep-alive intervals
  CHECK(node.livenessAcknowledgedAt() == last);
  // Nothing more is written to the fenced round.
  node.announce(round.number, StopReason::nodeLeft(node.self().id, 0, "host-10.0.0.1", 15));
  node.markDone(round.number, 1);
  CHECK_FALSE(store.check({MembershipKeys("fence").stop(round.number)}));
  CHECK_FALSE(store.check({MembershipKeys("fence").done(round.number)}));
  node.close(/*hostsStore=*/false);
}

TEST_CASE(
    "the fencing token: a stop record or a done count for a round the job has left is "
    "refused, the current round's is written",
    "[membership][fencing]") {
  HashStore store;
  TwoNodes nodes(store);
  const MembershipKeys keys("pair");
  // The job moves on to round 1 without these two (a partition healed, an agent frozen): the
  // store's current round is past round 0, whose stop record was never written.
  store.set(keys.currentRound(), "1");
  WorkerFailure failure;
  failure.exitCode = 1;
  const StopReason stale = StopReason::workerFailed(failure, nodes.b->self().id);
  CHECK(nodes.b->announce(0, stale).serialize() == stale.serialize());  // returned, not written
  nodes.b->markDone(0, 2);
  CHECK_FALSE(store.check({keys.stop(0)}));
  CHECK_FALSE(store.check({keys.done(0)}));
  // A write to the store's current round goes through.
  CHECK(nodes.a->announce(1, StopReason::done()).kind == StopKind::kDone);
  CHECK(store.check({keys.stop(1)}));
  // And a stop record a round already has is never replaced (create-if-absent).
  store.set(keys.currentRound(), "0");
  const StopReason first = StopReason::nodeLost(nodes.b->self().id, 1, "host-10.0.0.2");
  CHECK(nodes.a->announce(0, first).serialize() == first.serialize());
  CHECK(nodes.b->announce(0, stale).serialize() == first.serialize());
}

TEST_CASE(
    "a fenced node that leaves releases nothing quietly: the store reports it lost to its "
    "round",
    "[membership][fencing]") {
  // Its workers are gone: a quiet release would leave the others waiting on them.
  HashStore store;
  TwoNodes nodes(store);
  const std::int64_t b = nodes.b->self().id;
  nodes.b->fence(0);
  nodes.b->close(/*hostsStore=*/false);
  nodes.b.reset();  // its connections close
  const auto stop = StopReason::parse(store.get(MembershipKeys("pair").stop(0)));
  REQUIRE(stop);
  CHECK(stop->kind == StopKind::kNodeLost);
  CHECK(stop->node == b);
  nodes.a->close(/*hostsStore=*/false);
}

namespace {

// The in-process store behind a network that refuses every connection while `refusing` holds.
class RefusingBackend final : public StoreBackend {
 public:
  explicit RefusingBackend(HashStore& store) : inner_(store) {}
  std::unique_ptr<ddprun::rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds attempt) override {
    if (refusing.load()) {
      std::this_thread::sleep_for(2ms);
      throw ddprun::rendezvous::StoreConnectionError("in-process store: connection refused");
    }
    return inner_.connect(callTimeout, attempt);
  }
  std::string address() const override { return "in-process:0"; }
  StoreTenancy tenancy() const override { return StoreTenancy::kOneJob; }
  std::atomic<bool> refusing{true};

 private:
  SeverableStoreBackend inner_;
};

}  // namespace

TEST_CASE("a rejoin gives up at join_timeout from its start, the reconnect included, not twice it",
          "[membership][rejoin]") {
  HashStore store;
  RefusingBackend backend(store);
  RendezvousConfig config = c10dJob(2, 2, "rejoin");
  config.settings.joinTimeout = 10s;
  ddprun::test::ManualEventLoop loop;
  struct Events final : RendezvousEvents {
    void onRoundFormed(Round) override { formed = true; }
    void onRendezvousFailed(const RendezvousFailure& failed) override { failure = failed; }
    void onStop(int, StopReason) override {}
    void onStoreLost(const StoreLoss&) override {}
    bool formed = false;
    std::optional<RendezvousFailure> failure;
  } events;
  MembershipDriver driver(config, backend, nodeInfo(-1, "10.0.0.1"), loop);
  driver.attach(events);
  const auto start = loop.now();
  driver.rejoin();
  // The store is out of reach for 8 s of the 10: reconnecting spends them.
  for (int i = 0; i < 16; ++i) {
    loop.advance(500ms);
    std::this_thread::sleep_for(5ms);
  }
  backend.refusing = false;
  // Reached now, but the second node never comes: the join waits out what is left of the budget
  // and no more. A joiner's pass (at most 200 ms of real time) reads the clock each time.
  const auto waitForFailure = [&](std::chrono::milliseconds realTime) {
    loop.runUntil([&] { return events.failure.has_value(); }, realTime);
  };
  loop.advance(1900ms);  // 9.9 s into the rejoin: the budget is not spent yet
  waitForFailure(400ms);
  CHECK_FALSE(events.failure);
  loop.advance(200ms);  // 10.1 s: spent. Two clocks would wait until 18 s.
  for (int i = 0; i < 100 && !events.failure; ++i) {
    loop.advance(10ms);
    waitForFailure(100ms);
  }
  INFO("gave up "
       << std::chrono::duration_cast<std::chrono::milliseconds>(loop.now() - start).count()
       << " ms after the rejoin started");
  REQUIRE(events.failure);
  CHECK_FALSE(events.formed);
  CHECK(events.failure->message.find("join_timeout (10 s)") != std::string::npos);
  driver.leave(/*hostsStore=*/false, /*storeEndsAlone=*/false, 0ms);
}
