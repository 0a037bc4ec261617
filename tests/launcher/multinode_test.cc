// Several agents on 127.0.0.1 forming one job: static and dynamic rendezvous, a node lost, a
// node joining late, the store's host lost, a foreign run refused. (The same across network
// namespaces, with real separate addresses: tests/netns/multinode_test.sh.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ports.h"
#include "subprocess.h"
#include "temp_dir.h"

using ddprun::test::freePort;
using ddprun::test::Subprocess;
using ddprun::test::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kReport = std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/workers/report.sh";

// A c10d agent of job `id` on `port`, running report.sh until `until` exists (or with
// `reportArgs` instead). A later --rdzv-conf in `extra` replaces the default one.
std::unique_ptr<Subprocess> agent(const std::string& nnodes, std::uint16_t port, const std::string& id,
                                  const std::string& until, std::vector<std::string> extra = {},
                                  std::vector<std::string> reportArgs = {}) {
  std::vector<std::string> argv = {DDPRUN_BIN, "--nnodes", nnodes, "--nproc-per-node", "2",
                                   "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                   fmt::format("127.0.0.1:{}", port), "--rdzv-id", id,
                                   "--rdzv-conf", "last_call_timeout=1,join_timeout=20"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(kReport);
  if (reportArgs.empty()) reportArgs = {"--until", until};
  argv.insert(argv.end(), reportArgs.begin(), reportArgs.end());
  return std::make_unique<Subprocess>(argv, std::vector<std::string>{"LOGLEVEL=INFO"});
}

int count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

void finishJob(const std::string& until) { std::ofstream(until).put('\n'); }

}  // namespace

TEST_CASE("static rendezvous: node ranks become group ranks and rank 0 hosts the store", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::string port = std::to_string(freePort());
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (const char* rank : {"1", "0"}) {  // rank 1 first: it waits for rank 0's store
    nodes.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        DDPRUN_BIN, "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", rank,
        "--master-addr", "127.0.0.1", "--master-port", port, kReport, "--until", until}));
  }
  REQUIRE(eventually([&] {
    return count(nodes[0]->output() + nodes[1]->output(), "world=4 ") == 4;
  }, 20s));
  finishJob(until);
  for (auto& node : nodes) REQUIRE(node->wait(20s) == 0);
  const std::string rank1 = nodes[0]->output();
  CHECK(count(rank1, "^\\[default0\\]:rank=2 local_rank=0 world=4 group_rank=1 group_world=2 "
                     "restart=0 generation=0 master=127\\.0\\.0\\.1:" + port + "$") == 1);
  CHECK(count(rank1, "^\\[default1\\]:rank=3 local_rank=1 world=4 group_rank=1") == 1);
  CHECK(count(nodes[1]->output(), "rank=0 local_rank=0 world=4 group_rank=0") == 1);
}

TEST_CASE("three agents: one killed mid-run is noticed at once and the others re-form, then a late "
          "one joins and everyone re-forms again", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto a = agent("2:3", port, "elastic", until);
  REQUIRE(a->waitForError("hosting the rendezvous store", 10s));
  auto b = agent("2:3", port, "elastic", until);
  auto c = agent("2:3", port, "elastic", until);
  auto all = [&] { return a->output() + b->output() + c->output(); };
  REQUIRE(eventually([&] { return count(all(), "world=6 .*generation=0") == 6; }, 20s));

  // C dies without a word. Its connection drops, its hold lapses at once, the store writes the
  // round's stop key, and A and B re-form without it.
  const auto killed = Clock::now();
  c->signal(SIGKILL);
  REQUIRE(eventually([&] { return count(all(), "world=4 .*generation=1") == 4; }, 10s));
  const auto reformed = std::chrono::duration<double>(Clock::now() - killed).count();
  INFO("re-formed " << reformed << " s after the kill");
  CHECK(reformed < 5.0);
  CHECK_THAT(a->errors() + b->errors(), Catch::Contains("was lost"));

  // D arrives while the job runs with 2 of at most 3 nodes: everyone re-forms with 3.
  auto d = agent("2:3", port, "elastic", until);
  REQUIRE(eventually([&] { return count(all() + d->output(), "world=6 .*generation=2") == 6; }, 20s));
  CHECK_THAT(a->errors(), Catch::Contains("joins the job"));
  // The job's restart budget was not touched by membership changes.
  CHECK(count(all() + d->output(), "restart=0 generation=2") == 6);

  finishJob(until);
  for (auto* node : {a.get(), b.get(), d.get()}) CHECK(node->wait(20s) == 0);
}

TEST_CASE("when fewer than MIN nodes remain, the survivor says why and exits non-zero",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  // join_timeout is 20 s: the survivor must not wait for it, only last_call_timeout (1 s).
  auto a = agent("2:3", port, "shrink", until);
  REQUIRE(a->waitForError("hosting the rendezvous store", 10s));
  auto b = agent("2:3", port, "shrink", until);
  REQUIRE(eventually([&] { return count(a->output() + b->output(), "world=4 ") == 4; }, 20s));
  const auto killed = Clock::now();
  b->signal(SIGKILL);
  const auto status = a->wait(20s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status == 1);
  CHECK(took < 8.0);
  CHECK_THAT(a->errors(), Catch::Contains("only 1 node(s) remain of the at least 2"));
  CHECK_THAT(a->errors(), Catch::Contains("lower the minimum of --nnodes"));
}

TEST_CASE("a node whose workers finished exits non-zero soon when its only peer is lost",
          "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto host = agent("2", port, "finished", until);
  REQUIRE(host->waitForError("hosting the rendezvous store", 10s));
  auto done = agent("2", port, "finished", until, {}, {"--sleep", "0"});  // finishes at once
  REQUIRE(eventually([&] { return count(host->output() + done->output(), "world=4 ") == 4; }, 20s));
  std::this_thread::sleep_for(500ms);  // its workers are done; it waits in the exit barrier
  const auto killed = Clock::now();
  host->signal(SIGKILL);
  const auto status = done->wait(20s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status == 1);
  CHECK(took < 8.0);
}

TEST_CASE("the agent hosting the store stays until every node finished, past the exit barrier's "
          "timeout",
          "[multinode]") {
  TempDir dir;
  const std::uint16_t port = freePort();
  const std::vector<std::string> conf = {"--rdzv-conf",
                                         "last_call_timeout=1,join_timeout=20,exit_barrier_timeout=1"};
  auto host = agent("2", port, "uneven", "", conf, {"--sleep", "0"});
  REQUIRE(host->waitForError("hosting the rendezvous store", 10s));
  auto slow = agent("2", port, "uneven", "", conf, {"--sleep", "3"});
  CHECK(slow->wait(30s) == 0);
  CHECK(host->wait(30s) == 0);
  CHECK(count(host->output() + slow->output(), "world=4 ") == 4);
  CHECK_THAT(host->errors(), Catch::Contains("stays until they finish"));
}

TEST_CASE("an endpoint that never answers, or where something else answers, is exit code 2",
          "[multinode]") {
  const std::uint16_t port = freePort();  // nothing listens there; is_host=false: do not host
  auto nobody = agent("2", port, "nobody", "", {"--rdzv-conf", "is_host=false,read_timeout=1"});
  CHECK(nobody->wait(20s) == 2);
  CHECK_THAT(nobody->errors(), Catch::Contains("cannot reach the rendezvous store at 127.0.0.1"));
  CHECK_THAT(nobody->errors(), Catch::Contains("--rdzv-endpoint"));
  CHECK(count(nobody->output(), "rank=") == 0);  // nothing was started

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
  auto foreign = agent("2", foreignPort, "foreign", "",
                       {"--rdzv-conf", "is_host=false,read_timeout=5"});
  CHECK(foreign->wait(20s) == 2);
  CHECK_THAT(foreign->errors(), Catch::Contains("not a ddprun or TCPStore rendezvous store"));
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
  const auto listening = daemon.readLine(10s);
  REQUIRE(listening.has_value());
  const int port = ddprun::test::portFromListeningLine(*listening);
  REQUIRE(port > 0);
  auto a = agent("2", static_cast<std::uint16_t>(port), "daemonjob", until);
  auto b = agent("2", static_cast<std::uint16_t>(port), "daemonjob", until);
  REQUIRE(eventually([&] { return count(a->output() + b->output(), "world=4 ") == 4; }, 20s));
  finishJob(until);
  CHECK(a->wait(20s) == 0);
  CHECK(b->wait(20s) == 0);
  // Neither agent hosted the store: the daemon did, and outlives the job.
  CHECK_THAT(a->errors() + b->errors(), !Catch::Contains("hosting the rendezvous store"));
  CHECK_FALSE(daemon.wait(0ms).has_value());
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
}

TEST_CASE("losing the agent that hosts the store ends every other agent quickly", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto host = agent("2", port, "hostloss", until);
  REQUIRE(host->waitForError("hosting the rendezvous store", 10s));
  auto other = agent("2", port, "hostloss", until);
  REQUIRE(eventually([&] { return count(host->output() + other->output(), "world=4 ") == 4; }, 20s));
  const auto killed = Clock::now();
  host->signal(SIGKILL);
  const auto status = other->wait(15s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  REQUIRE(status.has_value());
  CHECK(*status != 0);
  CHECK(took < 5.0);
  CHECK_THAT(other->errors(), Catch::Contains("lost the rendezvous store") ||
                                   Catch::Contains("rendezvous failed"));
}

TEST_CASE("an agent of another run is refused by the store, never merged", "[multinode]") {
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::uint16_t port = freePort();
  auto mine = agent("2", port, "job-x", until);
  REQUIRE(mine->waitForError("hosting the rendezvous store", 10s));
  auto foreign = agent("2", port, "job-y", until);
  REQUIRE(foreign->wait(20s) == 1);
  CHECK_THAT(foreign->errors(), Catch::Contains("belongs to run 'job-x'"));
  CHECK_THAT(foreign->errors(), Catch::Contains("job-y"));
  mine->signal(SIGTERM);
  CHECK(mine->wait(10s) == 128 + SIGTERM);
}
