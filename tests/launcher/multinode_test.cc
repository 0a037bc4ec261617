// Several agents on 127.0.0.1 forming one job: static and dynamic rendezvous, a node lost, a
// node joining late, the store's host lost, a foreign run refused. (The same across network
// namespaces, with real separate addresses: tests/netns/multinode_test.sh.)
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "ddprun_command.h"
#include "lines.h"
#include "ports.h"
#include "report_jobs.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kReport = ddprun::test::launcherWorker("report.sh");
// Every test here runs within its CTest TIMEOUT (180 s) with room to spare: the bounds of its
// waits add up to 90 s at most, each many times what it takes on an idle machine.
constexpr auto kStartsHosting = 15s;  // an agent says it hosts the store
constexpr auto kForms = 20s;          // a round forms and its workers report
constexpr auto kFinishes = 20s;       // the agents of a job exit once `until` exists

// Holds last 10 s (keep_alive_max_attempt=10): a loss noticed only when a hold lapsed or a call
// timed out would take over 10 s; one noticed through a dropped connection takes about 1 s.
const std::vector<std::string> kSlowLapse = {
    "--rdzv-conf", "last_call_timeout=1,join_timeout=20,keep_alive_max_attempt=10"};

// A c10d agent of job `id` on `port`, running report.sh until `until` exists (or with
// `reportArgs` instead). A later --rdzv-conf in `extra` replaces the default one.
std::unique_ptr<Subprocess> agent(const std::string& nnodes, std::uint16_t port,
                                  const std::string& id, const std::string& until,
                                  std::vector<std::string> extra = {},
                                  std::vector<std::string> reportArgs = {},
                                  const std::string& logLevel = "INFO") {
  std::vector<std::string> rest = {"--rdzv-conf", "last_call_timeout=1,join_timeout=20"};
  rest.insert(rest.end(), extra.begin(), extra.end());
  rest.push_back("--no-python");
  rest.push_back(kReport);
  if (reportArgs.empty()) reportArgs = {"--until", until};
  rest.insert(rest.end(), reportArgs.begin(), reportArgs.end());
  return std::make_unique<Subprocess>(
      ddprun::test::c10dCommand(nnodes, 2, fmt::format("127.0.0.1:{}", port), id, rest),
      std::vector<std::string>{"LOGLEVEL=" + logLevel});
}

// Waits until `node` says it hosts the rendezvous store.
bool hosting(Subprocess& node) {
  return eventually([&] { return countLines(node.errors(), "hosting the rendezvous store") > 0; },
                    kStartsHosting, {&node});
}

// A static agent of `nnodes` (one worker each) at node rank `rank`, logging at INFO.
std::unique_ptr<Subprocess> staticNode(int nnodes, int rank, int port, const std::string& until) {
  return std::make_unique<Subprocess>(
      ddprun::test::staticCommand(nnodes, 1, rank, port,
                                  {"--no-python", kReport, "--until", until}),
      std::vector<std::string>{"LOGLEVEL=INFO"});
}

// Node 0 hosts the store and node 1 has joined it (the job still waits for the rest).
bool firstTwoJoined(Subprocess& zero, Subprocess& one) {
  return hosting(zero) &&
         eventually([&] { return countLines(zero.errors(), "2 node\\(s\\) joined") > 0; }, kForms,
                    {&zero, &one});
}

}  // namespace

TEST_CASE("static rendezvous: node ranks become group ranks and rank 0 hosts the store",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const int port = freePort();
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int rank : {1, 0}) {  // rank 1 first: it waits for rank 0's store
    nodes.push_back(std::make_unique<Subprocess>(
        ddprun::test::staticCommand(2, 2, rank, port, {"--no-python", kReport, "--until", until})));
  }
  REQUIRE(reported({nodes[0].get(), nodes[1].get()}, "world=4 ", 4, kForms));
  finishJob(until, {nodes[0].get(), nodes[1].get()}, kFinishes);
  const std::string rank1 = nodes[0]->output();
  CHECK(countLines(rank1, fmt::format("^\\[default0\\]:rank=2 local_rank=0 world=4 group_rank=1 "
                                      "group_world=2 restart=0 generation=0 "
                                      "master=127\\.0\\.0\\.1:{}$",
                                      port)) == 1);
  CHECK(countLines(rank1, "^\\[default1\\]:rank=3 local_rank=1 world=4 group_rank=1") == 1);
  CHECK(countLines(nodes[1]->output(), "rank=0 local_rank=0 world=4 group_rank=0") == 1);
}

TEST_CASE(
    "three agents: one killed mid-run is noticed at once and the others re-form, then a late "
    "one joins and everyone re-forms again",
    "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  const std::vector<std::string>& conf = kSlowLapse;
  auto a = agent("2:3", port, "elastic", until, conf);
  REQUIRE(hosting(*a));
  auto b = agent("2:3", port, "elastic", until, conf);
  auto c = agent("2:3", port, "elastic", until, conf);
  REQUIRE(reported({a.get(), b.get(), c.get()}, "world=6 .*generation=0", 6, kForms));

  // C dies without a word. Its connection drops, its hold lapses at once, the store writes the
  // round's stop key, and A and B re-form without it.
  const auto killed = Clock::now();
  c->signal(SIGKILL);
  REQUIRE(reported({a.get(), b.get(), c.get()}, "world=4 .*generation=1", 4, 15s));
  const auto reformed = std::chrono::duration<double>(Clock::now() - killed).count();
  INFO("re-formed " << reformed << " s after the kill");
  CHECK(reformed < 8.0);
  CHECK_THAT(a->errors() + b->errors(), Catch::Contains("was lost"));

  // D arrives while the job runs with 2 of at most 3 nodes: everyone re-forms with 3.
  auto d = agent("2:3", port, "elastic", until, conf);
  REQUIRE(reported({a.get(), b.get(), c.get(), d.get()}, "world=6 .*generation=2", 6, kForms));
  CHECK_THAT(a->errors(), Catch::Contains("joins the job"));
  // The job's restart budget was not touched by membership changes.
  CHECK(countLines(a->output() + b->output() + c->output() + d->output(),
                   "restart=0 generation=2") == 6);

  finishJob(until, {a.get(), b.get(), d.get()}, kFinishes);
}

TEST_CASE("when fewer than MIN nodes remain, the survivor says why and exits non-zero",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  // join_timeout is 20 s: the survivor must not wait for it, only last_call_timeout (1 s).
  auto a = agent("2:3", port, "shrink", until);
  REQUIRE(hosting(*a));
  auto b = agent("2:3", port, "shrink", until);
  REQUIRE(reported({a.get(), b.get()}, "world=4 ", 4, kForms));
  const auto killed = Clock::now();
  b->signal(SIGKILL);
  const auto status = exitStatus(*a, 25s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status == 1);
  CHECK(took < 12.0);
  CHECK_THAT(a->errors(), Catch::Contains("only 1 node(s) remain of the at least 2"));
  CHECK_THAT(a->errors(), Catch::Contains("lower the minimum of --nnodes"));
}

TEST_CASE("a node whose workers finished exits non-zero soon when its only peer is lost",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto host = agent("2", port, "finished", until);
  REQUIRE(hosting(*host));
  // Its workers finish at once; at DEBUG it says so, and then it waits in the exit barrier.
  auto done = agent("2", port, "finished", until, {}, {"--sleep", "0"}, "DEBUG");
  REQUIRE(reported({host.get(), done.get()}, "world=4 ", 4, kForms));
  REQUIRE(eventually([&] { return countLines(done->errors(), "every local worker exited 0") > 0; },
                     15s, {done.get(), host.get()}));
  const auto killed = Clock::now();
  host->signal(SIGKILL);
  const auto status = exitStatus(*done, 20s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status == 1);
  CHECK(took < 12.0);
}

TEST_CASE(
    "the agent hosting the store stays until every node finished, past the exit barrier's "
    "timeout",
    "[multinode]") {
  TempDir dir;
  const std::uint16_t port = freePort();
  const std::vector<std::string> conf = {
      "--rdzv-conf", "last_call_timeout=1,join_timeout=20,exit_barrier_timeout=1"};
  auto host = agent("2", port, "uneven", "", conf, {"--sleep", "0"});
  REQUIRE(hosting(*host));
  auto slow = agent("2", port, "uneven", "", conf, {"--sleep", "3"});
  const Deadline deadline(45s);
  CHECK(exitsWith(*slow, 0, deadline.left(), {host.get()}));
  CHECK(exitsWith(*host, 0, deadline.left(), {slow.get()}));
  CHECK(countLines(host->output() + slow->output(), "world=4 ") == 4);
  CHECK_THAT(host->errors(), Catch::Contains("stays until they finish"));
}

TEST_CASE("an endpoint that never answers, or where something else answers, is exit code 2",
          "[multinode]") {
  const std::uint16_t port = freePort();  // nothing listens there; is_host=false: do not host
  auto nobody = agent("2", port, "nobody", "", {"--rdzv-conf", "is_host=false,read_timeout=1"});
  CHECK(exitsWith(*nobody, 2, 20s));
  CHECK_THAT(nobody->errors(), Catch::Contains("cannot reach the rendezvous store at 127.0.0.1"));
  CHECK_THAT(nobody->errors(), Catch::Contains("--rdzv-endpoint"));
  CHECK(countLines(nobody->output(), "rank=") == 0);  // nothing was started

  // Something that is not a store: it answers every connection with a line of text.
  std::uint16_t foreignPort = 0;
  const int listener = ddprun::test::listenOnLoopback(foreignPort);
  REQUIRE(listener >= 0);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop) {
      const int peer = ::accept(listener, nullptr, nullptr);
      if (peer < 0) break;
      (void)!::write(peer, "HTTP/1.1 400 Bad Request\r\n\r\n", 28);
      ::close(peer);
    }
  });
  auto foreign =
      agent("2", foreignPort, "foreign", "", {"--rdzv-conf", "is_host=false,read_timeout=5"});
  CHECK(exitsWith(*foreign, 2, 20s));
  CHECK_THAT(foreign->errors(),
             Catch::Contains("is not a ddprun/TCPStore store: it looks like an "
                             "HTTP server (it answered 'HTTP/1.1 400 Bad Request')"));
  stop = true;
  ::shutdown(listener, SHUT_RDWR);
  ::close(listener);
  server.join();
}

TEST_CASE("agents rendezvous through a ddprun-rendezvous daemon already on the endpoint",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  Subprocess daemon({DDPRUN_RENDEZVOUS_BIN, "--port", "0"});
  const int port = ddprun::test::listeningPort(daemon, 10s);
  REQUIRE(port > 0);
  auto a = agent("2", static_cast<std::uint16_t>(port), "daemonjob", until);
  auto b = agent("2", static_cast<std::uint16_t>(port), "daemonjob", until);
  REQUIRE(reported({a.get(), b.get()}, "world=4 ", 4, kForms));
  finishJob(until, {a.get(), b.get()}, kFinishes);
  // Neither agent hosted the store: the daemon did, and outlives the job.
  CHECK_THAT(a->errors() + b->errors(), !Catch::Contains("hosting the rendezvous store"));
  CHECK_FALSE(daemon.wait(0ms).has_value());
  daemon.signal(SIGTERM);
  CHECK(exitsWith(daemon, 0, 10s));
}

TEST_CASE("losing the agent that hosts the store ends every other agent quickly", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  const std::vector<std::string>& conf = kSlowLapse;
  auto host = agent("2", port, "hostloss", until, conf);
  REQUIRE(hosting(*host));
  auto other = agent("2", port, "hostloss", until, conf);
  REQUIRE(reported({host.get(), other.get()}, "world=4 ", 4, kForms));
  const auto killed = Clock::now();
  host->signal(SIGKILL);
  const auto status = exitStatus(*other, 20s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status != 0);
  CHECK(took < 8.0);
  CHECK_THAT(other->errors(),
             Catch::Contains("lost the rendezvous store") || Catch::Contains("rendezvous failed"));
}

TEST_CASE("an agent of another run is refused by the store, never merged", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto mine = agent("2", port, "job-x", until);
  REQUIRE(hosting(*mine));
  auto foreign = agent("2", port, "job-y", until);
  REQUIRE(exitsWith(*foreign, 1, 20s, {mine.get()}));
  CHECK_THAT(foreign->errors(), Catch::Contains("belongs to run 'job-x'"));
  CHECK_THAT(foreign->errors(), Catch::Contains("job-y"));
  mine->signal(SIGTERM);
  CHECK(exitsWith(*mine, 128 + SIGTERM, 10s));
}

TEST_CASE(
    "static: a non-zero node that starts before the master waits for its store, past "
    "read_timeout",
    "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const int port = freePort();
  // read_timeout=1: before, node 1 gave up on the master's store after it; torchrun's static
  // rendezvous waits its `timeout` (900 s) for the master, and so does ddprun now.
  const std::vector<std::string> rest = {"--rdzv-conf", "read_timeout=1", "--no-python",
                                         kReport,       "--until",        until};
  Subprocess early(ddprun::test::staticCommand(2, 1, 1, port, rest));
  std::this_thread::sleep_for(3s);  // the master comes late, on purpose
  REQUIRE(exitStatus(early, 0ms) == std::nullopt);
  Subprocess master(ddprun::test::staticCommand(2, 1, 0, port, rest));
  REQUIRE(reported({&early, &master}, "world=2 ", 2, kForms));
  finishJob(until, {&early, &master}, kFinishes);
}

TEST_CASE("static: a node killed before the job starts and started again takes its place",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const int port = freePort();
  const auto node = [&](int rank) { return staticNode(3, rank, port, until); };
  auto zero = node(0);
  auto one = node(1);
  REQUIRE(firstTwoJoined(*zero, *one));
  one->signal(SIGKILL);  // while the job still waits for node 2
  REQUIRE(exitStatus(*one, 10s).has_value());
  auto again = node(1);
  auto two = node(2);
  REQUIRE(reported({zero.get(), again.get(), two.get()}, "world=3 ", 3, kForms));
  CHECK(countLines(again->output() + two->output(), "group_rank=1 ") == 1);
  finishJob(until, {zero.get(), again.get(), two.get()}, kFinishes);
}

TEST_CASE("elastic: an agent killed after joining but before the round closes is not counted",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  const std::vector<std::string> conf = {"--rdzv-conf", "last_call_timeout=4,join_timeout=30"};
  auto a = agent("2:3", port, "early-loss", until, conf);
  REQUIRE(hosting(*a));
  auto b = agent("2:3", port, "early-loss", until, conf);
  REQUIRE(eventually([&] { return countLines(a->errors(), "2 node\\(s\\) joined") > 0; }, kForms,
                     {a.get(), b.get()}));
  b->signal(SIGKILL);  // within last_call_timeout: the round has not closed
  REQUIRE(exitStatus(*b, 10s).has_value());
  auto c = agent("2:3", port, "early-loss", until, conf);
  // The round forms with the two live agents only: 2 workers each, world 4 (not 6).
  REQUIRE(reported({a.get(), c.get()}, "world=4 ", 4, 30s));
  CHECK(countLines(a->output() + c->output(), "world=6 ") == 0);
  finishJob(until, {a.get(), c.get()}, kFinishes);
}

TEST_CASE(
    "SIGTERM to the agent hosting the store: the others stop instead of restarting into a "
    "round without a store, and the host is gone within its shutdown timeout",
    "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  const std::vector<std::string> conf = {"--shutdown-timeout", "2", "--rdzv-conf",
                                         "last_call_timeout=1,join_timeout=20"};
  auto a = agent("2:3", port, "host-leaves", until, conf);
  REQUIRE(hosting(*a));
  auto b = agent("2:3", port, "host-leaves", until, conf);
  auto c = agent("2:3", port, "host-leaves", until, conf);
  REQUIRE(reported({a.get(), b.get(), c.get()}, "world=6 .*generation=0", 6, kForms));
  const auto stopped = Clock::now();
  a->signal(SIGTERM);
  const Deadline deadline(20s);
  CHECK(exitsWith(*a, 128 + SIGTERM, deadline.left(), {a.get(), b.get(), c.get()}));
  const double hostGone = std::chrono::duration<double>(Clock::now() - stopped).count();
  CHECK(exitsWith(*b, 1, deadline.left(), {a.get(), b.get(), c.get()}));
  CHECK(exitsWith(*c, 1, deadline.left(), {a.get(), b.get(), c.get()}));
  INFO("the host was gone " << hostGone << " s after SIGTERM");
  CHECK(hostGone < 2.0 + 3.0);  // its shutdown timeout, and a margin for a loaded machine
  // Nobody restarted its workers into a round that would lose its store moments later.
  CHECK(countLines(a->output() + b->output() + c->output(), "generation=1") == 0);
  CHECK_THAT(b->errors(), Catch::Contains("hosting the rendezvous store"));
}

TEST_CASE(
    "static: a second agent claiming a node rank that a running agent holds is told so, "
    "exit 2",
    "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const int port = freePort();
  const auto node = [&](int rank) { return staticNode(3, rank, port, until); };
  auto zero = node(0);
  auto one = node(1);
  REQUIRE(firstTwoJoined(*zero, *one));
  auto duplicate = node(1);
  REQUIRE(exitsWith(*duplicate, 2, kForms, {zero.get(), one.get(), duplicate.get()}));
  CHECK_THAT(duplicate->errors(), Catch::Contains("--node-rank 1 is taken by the running agent"));
  auto two = node(2);
  REQUIRE(reported({zero.get(), one.get(), two.get()}, "world=3 ", 3, kForms));
  finishJob(until, {zero.get(), one.get(), two.get()}, kFinishes);
}
