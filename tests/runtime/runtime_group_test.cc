// Process groups formed in one test process (one thread per rank, rank 0 hosting the store, as
// torch's env:// does without an agent): bootstrap, collectives, and what a caller sees when a
// peer closes, hangs, or the store is not there.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "ddprun/rendezvous/prefix_store.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "ddprun/runtime/process_group.h"
#include "ports.h"
#include "test_server.h"

using namespace ddprun::runtime;
using ddprun::test::freePort;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

RuntimeOptions optionsFor(int rank, int world, int port, std::chrono::milliseconds timeout = 10s) {
  RuntimeOptions options;
  options.rank = rank;
  options.worldSize = world;
  options.masterPort = port;
  options.hostStore = true;
  options.backend = BackendKind::kGloo;
  options.timeout = timeout;
  options.runId = "group-test";
  return options;
}

// Runs body(rank, group) on one thread per rank and rethrows the first failure.
template <typename Body>
void onEveryRank(int world, int port, Body body, std::chrono::milliseconds timeout = 10s) {
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.push_back(std::async(std::launch::async, [=] {
      auto group = ProcessGroup::init(optionsFor(rank, world, port, timeout));
      body(rank, *group);
    }));
  }
  for (auto& rank : ranks) rank.get();
}

}  // namespace

TEST_CASE("three ranks bootstrap from a store rank 0 hosts and agree on every collective") {
  onEveryRank(3, freePort(), [](int rank, ProcessGroup& group) {
    CHECK(group.rank() == rank);
    CHECK(group.worldSize() == 3);
    CHECK(group.backend() == BackendKind::kGloo);
    std::vector<double> values{1.0 * rank, 2.0, -1.0 * rank};
    group.allReduce(values.data(), values.size(), ReduceOp::kSum);
    CHECK(values == std::vector<double>{3, 6, -3});
    std::int32_t root = rank == 2 ? 77 : 0;
    group.broadcast(&root, 1, 2);
    CHECK(root == 77);
    std::int64_t mine = 10 + rank;
    std::vector<std::int64_t> all(3);
    group.allGather(&mine, all.data(), 1);
    CHECK(all == std::vector<std::int64_t>{10, 11, 12});
    group.barrier();
  });
}

TEST_CASE("a world of one needs no peers") {
  auto group = ProcessGroup::init(optionsFor(0, 1, freePort()));
  float x[] = {1.5f, -2.0f};
  group->allReduce(x, 2, ReduceOp::kAvg);
  CHECK((x[0] == 1.5f && x[1] == -2.0f));
  group->barrier();
}

TEST_CASE("a peer that closes mid-collective is reported at once, and the group stays broken") {
  const int port = freePort();
  std::promise<void> rank1Ready;
  auto rank1 = std::async(std::launch::async, [&] {
    auto group = ProcessGroup::init(optionsFor(1, 2, port, 20s));
    rank1Ready.set_value();
    std::this_thread::sleep_for(200ms);
    group->shutdown();  // its connections close, as when the process dies
  });
  auto group = ProcessGroup::init(optionsFor(0, 2, port, 20s));
  rank1Ready.get_future().wait();
  rank1.get();
  std::vector<float> data(1024, 1.0f);
  const auto start = Clock::now();
  try {
    group->allReduce(data.data(), data.size());
    FAIL("allReduce succeeded without its peer");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kPeerFailure);
    CHECK_THAT(error.what(), Catch::Contains("gloo all_reduce failed on rank 0 of 2"));
  }
  CHECK(Clock::now() - start < 5s);  // far below the 20 s timeout
  try {
    group->barrier();
    FAIL("a broken group ran a barrier");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kPeerFailure);
    CHECK_THAT(error.what(), Catch::Contains("broken by an earlier failure"));
  }
}

TEST_CASE("a peer that hangs is reported after the timeout, not never") {
  const int port = freePort();
  std::promise<void> done;
  auto rank1 = std::async(std::launch::async, [&] {
    auto group = ProcessGroup::init(optionsFor(1, 2, port, 500ms));
    done.get_future().wait();  // alive, connected, silent
  });
  auto group = ProcessGroup::init(optionsFor(0, 2, port, 500ms));
  std::vector<float> data(16, 1.0f);
  const auto start = Clock::now();
  try {
    group->allReduce(data.data(), data.size());
    FAIL("allReduce succeeded without its peer");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kTimeout);
    CHECK_THAT(error.what(), Catch::Contains("raise DDPRUN_TIMEOUT"));
  }
  const auto waited = Clock::now() - start;
  CHECK(waited >= 450ms);
  CHECK(waited < 3s);
  done.set_value();
  rank1.get();
}

TEST_CASE("a missing store is a timeout naming MASTER_ADDR:MASTER_PORT") {
  auto options = optionsFor(1, 2, freePort(), 300ms);
  try {
    ProcessGroup::init(options);
    FAIL("init succeeded without a store");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kTimeout);
    CHECK_THAT(error.what(), Catch::Contains("cannot reach the store at 127.0.0.1:" +
                                             std::to_string(options.masterPort)));
  }
}

TEST_CASE("ranks that chose different backends all fail at once, naming the split and the fix") {
  // Only Gloo can be chosen without a GPU, so rank 1 is played by hand: it votes as a rank that
  // picked NCCL would (the keys are the runtime's, under its bootstrap namespace).
  ddprun::test::TestServer server;
  auto options = optionsFor(0, 2, server.port());
  options.hostStore = false;
  auto rank0 = std::async(std::launch::async, [&] { ProcessGroup::init(options); });
  ddprun::rendezvous::PrefixStore rank1(
      std::make_shared<ddprun::rendezvous::TcpStore>(server.clientOptions()),
      "ddprun/runtime/group-test/0/default");
  const auto start = Clock::now();
  rank1.add("backend/nccl", 1);
  rank1.barrier("backend/voted", 2, 10s);
  CHECK(rank1.add("backend/nccl", 0) == 1);  // what rank 1 sees: not everyone chose NCCL
  try {
    rank0.get();
    FAIL("rank 0 formed a group with a rank on another backend");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kUnavailable);
    CHECK_THAT(error.what(), Catch::Contains("the ranks do not agree on the backend: rank 0 uses "
                                             "gloo (asked for) but 1 of the 2 ranks use nccl") &&
                                 Catch::Contains("set DDPRUN_BACKEND to the same value"));
  }
  CHECK(Clock::now() - start < 5s);  // not the 10 s bootstrap timeout
}

TEST_CASE("bad options and an unusable NCCL are refused before anything connects") {
  auto options = optionsFor(2, 2, freePort());
  try {
    ProcessGroup::init(options);
    FAIL("rank 2 of 2 accepted");
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kInvalidArgument);
    CHECK_THAT(error.what(), Catch::Contains("rank 2 is not in [0, 2)"));
  }
  options = optionsFor(0, 1, freePort());
  options.backend = BackendKind::kNccl;
  try {
    auto group = ProcessGroup::init(options);
    CHECK(group->backend() == BackendKind::kNccl);  // a GPU host: NCCL works
  } catch (const RuntimeError& error) {
    CHECK(error.kind() == RuntimeError::Kind::kUnavailable);
    CHECK_THAT(error.what(), Catch::Contains("the NCCL backend was asked for but") &&
                                 Catch::Contains("DDPRUN_BACKEND=gloo"));
  }
}
