// --rdzv-backend etcd end to end (issue #20): real agents (the ddprun binary) rendezvousing on a
// real 3-member etcd 3.4 on loopback (tests/support/etcd_cluster.h), with report.sh workers for
// the elastic behaviour and examples/train_ddp.py (through ddp_training.py, which checks it) for
// DDP training.
//
// A C++ driver rather than Python: the etcd cluster for tests exists once, in C++
// (etcd_cluster.h: free ports, data in /dev/shm, one process group dying with the test), and the
// agent helpers are multinode_test's. Cases tagged [elastic] share one cluster (the CTest entry
// runs them in one process); [torch113] and [torch2] each start their own.
//
// Skips (77) without /usr/bin/etcd; [torch2] skips (77) without the torch 2.6 chroot.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <memory>
#include <sstream>

#include "ddprun_command.h"
#include "etcd_cluster.h"
#include "lines.h"
#include "ports.h"
#include "report_jobs.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using namespace ddprun::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kReport = launcherWorker("report.sh");
// Bounds of the waits, each many times what it takes on an idle 2-core machine.
constexpr auto kForms = 20s;     // a round forms and its workers report
constexpr auto kFinishes = 20s;  // the agents of a job exit once `until` exists

// The cluster of the [elastic] cases, started by the first and stopped at exit.
EtcdCluster& sharedCluster() {
  EtcdCluster::skipUnlessInstalled();
  static EtcdCluster cluster;
  return cluster;
}

// An etcd agent of job `id` with one report.sh worker running until `until` exists.
// join_timeout 20 s, last_call_timeout 1 s unless `conf` says otherwise (a later --rdzv-conf
// entry wins).
// `options` go before the worker (--max-restarts N), `reportArgs` replace "--until until".
std::unique_ptr<Subprocess> agent(const std::string& nnodes, const std::string& endpoints,
                                  const std::string& id, const std::string& until,
                                  const std::string& conf = "",
                                  std::vector<std::string> options = {},
                                  std::vector<std::string> reportArgs = {}) {
  std::vector<std::string> args = {
      "--nnodes",         nnodes,
      "--nproc-per-node", "1",
      "--rdzv-backend",   "etcd",
      "--rdzv-endpoint",  endpoints,
      "--rdzv-id",        id,
      "--rdzv-conf",      "join_timeout=20,last_call_timeout=1" + (conf.empty() ? "" : "," + conf)};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--no-python", kReport});
  if (reportArgs.empty()) reportArgs = {"--until", until};
  args.insert(args.end(), reportArgs.begin(), reportArgs.end());
  return std::make_unique<Subprocess>(ddprunCommand(args),
                                      std::vector<std::string>{"LOGLEVEL=INFO"});
}

// The job's keys left in etcd (the default prefix: /ddprun/<run id>/), one per line.
std::string keysOf(EtcdCluster& cluster, const std::string& id) {
  return cluster.etcdctl({"get", "--prefix", "--keys-only", "/ddprun/" + id + "/"});
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE(
    "etcd: an elastic 1:3 job survives SIGKILL of the agent hosting the workers' store, then "
    "a late joiner scales it up; the job's keys are gone after it",
    "[elastic]") {
  EtcdCluster& cluster = sharedCluster();
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::string endpoints = cluster.endpoints();
  auto a = agent("1:3", endpoints, "elastic", until);
  auto b = agent("1:3", endpoints, "elastic", until);
  // The first round may form with one of them (last_call_timeout 1 s) and re-form with both.
  REQUIRE(reported({a.get(), b.get()}, "world=2 ", 2, kForms));

  // Kill the agent whose worker is group rank 0: its agent hosts the round's workers' store.
  const bool aHosts = countLines(a->output(), "world=2 group_rank=0 ") == 1;
  Subprocess& host = aHosts ? *a : *b;
  Subprocess& survivor = aHosts ? *b : *a;
  const int aloneBefore = countLines(survivor.output(), "world=1 group_rank=0 ");
  const auto killed = Clock::now();
  host.signal(SIGKILL);
  // Its lease (5 s: keep_alive_interval 1 s x keep_alive_max_attempt 5) expires, etcd deletes its
  // alive key, the survivor's watch reports it lost, and the survivor re-forms alone, hosting
  // the new workers' store itself.
  REQUIRE(eventually(
      [&] { return countLines(survivor.output(), "world=1 group_rank=0 ") > aloneBefore; }, kForms,
      {&survivor}));
  const double reformed = secondsSince(killed);
  WARN("etcd: the survivor's new group ran " << reformed << " s after SIGKILL of the store's host");
  CHECK(reformed < 10.0);  // TTL 5 s + one keep-alive 1 s + re-forming, with room on a busy machine
  CHECK_THAT(survivor.errors(), Catch::Contains("was lost"));

  // A late joiner: the job runs 1 of at most 3 nodes, so it re-forms with 2.
  const std::string beforeJoin = survivor.output();
  auto c = agent("1:3", endpoints, "elastic", until);
  REQUIRE(eventually(
      [&] {
        return countLines(survivor.output().substr(beforeJoin.size()) + c->output(), "world=2 ") ==
               2;
      },
      kForms, {&survivor, c.get()}));
  CHECK_THAT(survivor.errors(), Catch::Contains("joins the job"));
  // Membership changes spend no restart.
  CHECK(countLines(survivor.output() + c->output(), "restart=[1-9]") == 0);

  finishJob(until, {&survivor, c.get()}, kFinishes);
  // The last agent out removed the job's keys with one prefix delete.
  CHECK(keysOf(cluster, "elastic").empty());
}

TEST_CASE(
    "etcd: a failed worker restarts the whole job within the job-global --max-restarts, "
    "then the exit barrier ends it",
    "[elastic]") {
  EtcdCluster& cluster = sharedCluster();
  // Rank 1 fails in the first run only: one restart of both nodes, then both succeed. Every rank
  // lingers 1 s after its line, so that rank 0 on the other node has printed its line of the
  // first run before the failure stops it (a rank stopped before its first line prints none).
  const std::vector<std::string> failOnce = {"--fail-rank", "1", "--fail-restart", "0",
                                             "--exit",      "3", "--sleep",        "1"};
  auto a = agent("2", cluster.endpoints(), "restarts", "", "", {"--max-restarts", "1"}, failOnce);
  auto b = agent("2", cluster.endpoints(), "restarts", "", "", {"--max-restarts", "1"}, failOnce);
  const Deadline deadline(40s);
  CHECK(exitsWith(*a, 0, deadline.left(), {b.get()}));
  CHECK(exitsWith(*b, 0, deadline.left(), {a.get()}));
  const std::string all = a->output() + b->output();
  CHECK(countLines(all, "world=2 .*restart=0 generation=0") == 2);
  CHECK(countLines(all, "world=2 .*restart=1 generation=1") == 2);
  CHECK(countLines(all, "restart=2") == 0);
  CHECK(keysOf(cluster, "restarts").empty());

  // With the budget spent, the same failure ends the job with its exit code on both nodes (the
  // ranks linger 1 s after their line here too, for the same reason).
  const std::vector<std::string> failAlways = {"--fail-rank", "1", "--exit", "3", "--sleep", "1"};
  auto c = agent("2", cluster.endpoints(), "spent", "", "", {"--max-restarts", "1"}, failAlways);
  auto d = agent("2", cluster.endpoints(), "spent", "", "", {"--max-restarts", "1"}, failAlways);
  CHECK(exitsWith(*c, 3, deadline.left(), {d.get()}));
  CHECK(exitsWith(*d, 3, deadline.left(), {c.get()}));
  CHECK(countLines(c->output() + d->output(), "restart=1 generation=1") == 2);
}

TEST_CASE("etcd: SIGKILL of the etcd leader mid-job disturbs nothing: no re-form, the job finishes",
          "[elastic]") {
  EtcdCluster& cluster = sharedCluster();
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::string endpoints = cluster.endpoints();
  // Under torch's legacy prefix, to see etcd_prefix put every key of the job there.
  auto a = agent("2", endpoints, "leaderloss", until, "etcd_prefix=/torchelastic/p2p");
  auto b = agent("2", endpoints, "leaderloss", until, "etcd_prefix=/torchelastic/p2p");
  REQUIRE(reported({a.get(), b.get()}, "world=2 .*generation=0", 2, kForms));
  CHECK_THAT(
      cluster.etcdctl({"get", "--prefix", "--keys-only", "/torchelastic/p2p/ddprun/leaderloss/"}),
      Catch::Contains("/torchelastic/p2p/ddprun/leaderloss/alive/"));
  CHECK(keysOf(cluster, "leaderloss").empty());
  const int leader = cluster.leader(10s);
  REQUIRE(leader >= 0);
  cluster.kill(leader);
  // Past a whole lease TTL (5 s) and the election: a lease is extended by the new leader, and
  // every renewal fails over to the members left.
  std::this_thread::sleep_for(7s);
  CHECK(countLines(a->output() + b->output(), "generation=[1-9]") == 0);
  finishJob(until, {a.get(), b.get()}, kFinishes);
  CHECK_THAT(a->errors() + b->errors(), !Catch::Contains("was lost"));
  CHECK(cluster.etcdctl({"get", "--prefix", "--keys-only", "/torchelastic/p2p/"}).empty());
  cluster.heal();
}

TEST_CASE("etcd: agents of another run id are another job on the same etcd, never merged",
          "[elastic]") {
  EtcdCluster& cluster = sharedCluster();
  TempDir dir;
  const std::string until = dir.path + "/stop";
  const std::string endpoints = cluster.endpoints();
  auto x = agent("2", endpoints, "job-x", until);
  // job-y wants 2 nodes too and finds none of its own: it says so while it waits, then gives up.
  auto y = agent("2", endpoints, "job-y", until, "join_timeout=6");
  auto x2 = agent("2", endpoints, "job-x", until);
  REQUIRE(reported({x.get(), x2.get()}, "world=2 ", 2, kForms));
  REQUIRE(exitsWith(*y, 1, 20s, {x.get(), x2.get()}));
  CHECK_THAT(y->errors(), Catch::Contains("rendezvous round 0 of run 'job-y': 1 node(s) joined, "
                                          "waiting for at least 2"));
  CHECK_THAT(y->errors(), Catch::Contains("did not complete within join_timeout"));
  CHECK(countLines(y->output(), "rank=") == 0);
  finishJob(until, {x.get(), x2.get()}, kFinishes);
  CHECK(keysOf(cluster, "job-x").empty());
  CHECK(keysOf(cluster, "job-y").empty());
}

TEST_CASE(
    "etcd: jobs P, P-x and P.x are three jobs: P ending normally leaves the others running "
    "with their keys; P/x is refused with exit 2",
    "[elastic]") {
  EtcdCluster& cluster = sharedCluster();
  TempDir dir;
  const std::string endpoints = cluster.endpoints();
  // P's prefix delete at its end is a range over "/ddprun/P/": it must reach no key of a job whose
  // id starts with "P" (an etcd range without the '/' would take "/ddprun/P-x/..." along).
  auto p = agent("1", endpoints, "P", dir.path + "/stop-P");
  auto dash = agent("1", endpoints, "P-x", dir.path + "/stop-P-x");
  auto dot = agent("1", endpoints, "P.x", dir.path + "/stop-P.x");
  REQUIRE(reported({p.get()}, "world=1 ", 1, kForms));
  REQUIRE(reported({dash.get()}, "world=1 ", 1, kForms));
  REQUIRE(reported({dot.get()}, "world=1 ", 1, kForms));
  const std::string dashKeys = keysOf(cluster, "P-x");
  const std::string dotKeys = keysOf(cluster, "P.x");
  CHECK_THAT(dashKeys, Catch::Contains("/ddprun/P-x/alive/"));
  CHECK_THAT(dotKeys, Catch::Contains("/ddprun/P.x/alive/"));

  finishJob(dir.path + "/stop-P", {p.get()}, kFinishes);
  CHECK(keysOf(cluster, "P").empty());  // P removed its own keys
  // The others run on: every key they had is still there, their workers too, nothing lost.
  const auto keptAll = [&](const std::string& id, const std::string& before) {
    const std::string now = keysOf(cluster, id);
    INFO("job " << id << " had:\n" << before << "now has:\n" << now);
    std::istringstream lines(before);
    for (std::string key; std::getline(lines, key);) {
      if (!key.empty()) CHECK(now.find(key + "\n") != std::string::npos);
    }
  };
  keptAll("P-x", dashKeys);
  keptAll("P.x", dotKeys);
  std::this_thread::sleep_for(1500ms);  // past a keep-alive: a deleted alive key would be noticed
  CHECK_FALSE(dash->wait(0ms).has_value());
  CHECK_FALSE(dot->wait(0ms).has_value());
  CHECK_THAT(dash->errors() + dot->errors(), !Catch::Contains("was lost"));

  // P/x would live under P's keys: refused before anything is written, one line naming the rule.
  auto nested = agent("1", endpoints, "P/x", dir.path + "/stop-P");
  REQUIRE(exitsWith(*nested, 2, 20s, {dash.get(), dot.get()}));
  const std::string errors = nested->errors();
  INFO(errors);
  CHECK(countLines(errors, "^ddprun: error: ") == 1);
  CHECK_THAT(errors,
             Catch::Contains("ddprun: error: --rdzv-id 'P/x': a run id is 1..128 of A-Z a-z 0-9 "
                             ". _ - (not starting with . or -); e.g. --rdzv-id job1"));
  CHECK(cluster.etcdctl({"get", "--prefix", "--keys-only", "/ddprun/P/"}).empty());

  finishJob(dir.path + "/stop-P-x", {dash.get()}, kFinishes);
  finishJob(dir.path + "/stop-P.x", {dot.get()}, kFinishes);
  CHECK(keysOf(cluster, "P-x").empty());
  CHECK(keysOf(cluster, "P.x").empty());
}

TEST_CASE(
    "etcd unreachable at start: one line naming the members and the fix, exit 2, within "
    "read_timeout",
    "[elastic]") {
  EtcdCluster::skipUnlessInstalled();
  TempDir dir;
  const std::uint16_t first = freePort();
  const std::uint16_t second = freePort();
  const auto started = Clock::now();
  auto nobody = agent("2", fmt::format("127.0.0.1:{},127.0.0.1:{}", first, second), "nobody",
                      dir.path + "/stop", "read_timeout=2");
  CHECK(exitsWith(*nobody, 2, 20s));
  const double took = secondsSince(started);
  WARN("etcd unreachable: exit 2 after " << took << " s with read_timeout=2");
  CHECK(took < 6.0);
  const std::string errors = nobody->errors();
  CHECK(countLines(errors, "^ddprun: error: ") == 1);
  const auto line = findLine(errors, "^ddprun: error: ");
  REQUIRE(line);
  CHECK_THAT(*line, Catch::Contains(
                        fmt::format("http://127.0.0.1:{},http://127.0.0.1:{}", first, second)) &&
                        Catch::Contains("within read_timeout (2 s)") &&
                        Catch::Contains("check that etcd runs there"));
  CHECK(countLines(nobody->output(), "rank=") == 0);
}

namespace {

// The one "ddprun: error: " line of an agent that exited 2 (the test fails when there are more).
std::string badInputLine(Subprocess& agent) {
  const std::string errors = agent.errors();
  INFO(errors);
  CHECK(countLines(errors, "^ddprun: error: ") == 1);
  return findLine(errors, "^ddprun: error: ").value_or("(no error line)");
}

}  // namespace

TEST_CASE(
    "etcd with auth: a user whose role covers only the job's prefix runs a 2-node job, and a "
    "wrong password, a password file others can read, no user: exit 2 at once, one line",
    "[auth]") {
  EtcdCluster::skipUnlessInstalled();
  TempDir dir;  // outlives the cluster
  EtcdCluster::Options clusterOptions;
  clusterOptions.members = 1;  // auth is per cluster; one member is enough to show it
  EtcdCluster cluster(clusterOptions);
  cluster.enableAuth("/ddprun/authjob/", "alice", "alicepw");
  const std::string endpoints = cluster.endpoints();
  const std::string until = dir.path + "/stop";
  const std::string password = writeFile(dir.path + "/alice.pw", "alicepw\n", 0600);

  auto a = agent("2", endpoints, "authjob", until, "username=alice,password_file=" + password);
  auto b = agent("2", endpoints, "authjob", until, "username=alice,password_file=" + password);
  REQUIRE(reported({a.get(), b.get()}, "world=2 ", 2, kForms));
  // ddprun status reads through the agents' etcd client: without the job's etcd user it is
  // refused as an agent is (exit 2, one line), with it the job is shown.
  const auto status = [&](const std::string& conf) {
    std::vector<std::string> args = {"status",  "--rdzv-backend", "etcd",   "--rdzv-endpoint",
                                     endpoints, "--rdzv-id",      "authjob"};
    if (!conf.empty()) args.insert(args.end(), {"--rdzv-conf", conf});
    return std::make_unique<Subprocess>(ddprunCommand(args));
  };
  auto anonymous = status("");
  CHECK(exitsWith(*anonymous, 2, 20s));
  CHECK_THAT(badInputLine(*anonymous),
             Catch::Contains("etcd refuses to read '/ddprun/authjob/' without a user") &&
                 Catch::Contains("needs --rdzv-conf username=NAME,password_file=PATH") &&
                 !Catch::Contains("--rdzv-endpoint"));
  CHECK(anonymous->output().empty());
  // As alice: the job, once both agents have published their first snapshot (before that, what
  // the round records say).
  std::string shown;
  CHECK(eventually(
      [&] {
        auto asAlice = status("username=alice,password_file=" + password);
        const auto code = exitStatus(*asAlice, 20s);
        shown =
            fmt::format("exit {}: {}{}", code.value_or(-1), asAlice->output(), asAlice->errors());
        // Both nodes: the round's, and each agent's own snapshot (published apart).
        return code == 0 && asAlice->output().find(", 2 nodes\n") != std::string::npos &&
               asAlice->output().find("\nnode 0 on ") != std::string::npos &&
               asAlice->output().find("\nnode 1 on ") != std::string::npos;
      },
      20s, [&] { return shown; }));
  CHECK_THAT(shown, Catch::StartsWith("exit 0: job 'authjob': round 0, ") &&
                        Catch::Contains(", 2 nodes\n"));
  finishJob(until, {a.get(), b.get()}, kFinishes);
  CHECK(cluster.etcdctl({"--user=root:rootpw", "get", "--prefix", "--keys-only", "/ddprun/"})
            .empty());

  // Each refusal comes at once: well within read_timeout (60 s), which retries only an etcd that
  // does not answer.
  const auto refused = [&](const std::string& conf, const std::string& id = "authjob") {
    const auto started = Clock::now();
    auto agentProcess = agent("2", endpoints, id, until, conf);
    CHECK(exitsWith(*agentProcess, 2, 20s));
    const double took = secondsSince(started);
    WARN("etcd with auth: exit 2 after " << took << " s with --rdzv-conf '" << conf << "'");
    CHECK(took < 10.0);
    CHECK(countLines(agentProcess->output(), "rank=") == 0);
    return badInputLine(*agentProcess);
  };
  const std::string wrongFile = writeFile(dir.path + "/wrong.pw", "not-alices-pw-7f3\n", 0600);
  const std::string wrong = refused("username=alice,password_file=" + wrongFile);
  CHECK_THAT(wrong, Catch::Contains("etcd refused user 'alice': ") &&
                        Catch::Contains("check username= and password_file= in --rdzv-conf"));
  CHECK_THAT(wrong, !Catch::Contains("not-alices-pw-7f3"));

  // The right password, another job's prefix, which alice's role does not cover: the role of the
  // recipe (docs/errors.md, a prefix ending in '/') covers job authjob alone, not one whose id
  // starts with it.
  CHECK_THAT(refused("username=alice,password_file=" + password, "otherjob"),
             Catch::Contains("etcd refused user 'alice': ") &&
                 Catch::Contains("permission denied") &&
                 Catch::Contains("that the user's role may read and write '/ddprun/otherjob/'"));
  for (const std::string sibling : {"authjob-x", "authjob.x", "authjobx"}) {
    CHECK_THAT(
        refused("username=alice,password_file=" + password, sibling),
        Catch::Contains("permission denied") &&
            Catch::Contains("that the user's role may read and write '/ddprun/" + sibling + "/'"));
  }

  const std::string openFile = writeFile(dir.path + "/open.pw", "alicepw\n", 0644);
  CHECK_THAT(
      refused("username=alice,password_file=" + openFile),
      Catch::Contains("the etcd password file " + openFile + " can be read by other users") &&
          Catch::Contains("run `chmod 600 " + openFile + "`"));

  CHECK_THAT(refused(""),
             Catch::Contains("etcd refuses to read '/ddprun/authjob/' without a user") &&
                 Catch::Contains("needs --rdzv-conf username=NAME,password_file=PATH") &&
                 !Catch::Contains("--rdzv-endpoint"));
}

TEST_CASE(
    "etcd and the job's token: on an etcd without auth a stop forged by anyone ends a job "
    "as a success, so a job with a token is refused there at start; on an etcd with auth "
    "the same forgery is refused and the job with a token trains on",
    "[token]") {
  EtcdCluster::skipUnlessInstalled();
  TempDir dir;  // outlives the clusters
  const std::string until = dir.path + "/stop";
  const std::string token =
      writeFile(dir.path + "/job.token", "0123456789abcdef0123456789abcdef\n", 0600);
  // What an outsider writes: the round's stop record saying the job is done. With no user, as
  // a process that holds neither the job's token nor an etcd user's password.
  const auto forgeStop = [](EtcdCluster& cluster, const std::string& id) {
    try {
      cluster.etcdctl({"put", "/ddprun/" + id + "/round/0/stop", R"({"kind":"done"})"});
      return true;
    } catch (const std::runtime_error& refused) {
      WARN("the forged stop was refused: " << refused.what());
      return false;
    }
  };

  {
    EtcdCluster::Options clusterOptions;
    clusterOptions.members = 1;
    EtcdCluster open(clusterOptions);
    const std::string endpoints = open.endpoints();

    // Without a token (as torchrun on etcd): the forgery ends the job as a success.
    auto a = agent("2", endpoints, "opentok", until);
    auto b = agent("2", endpoints, "opentok", until);
    REQUIRE(reported({a.get(), b.get()}, "world=2 ", 2, kForms));
    REQUIRE(forgeStop(open, "opentok"));
    const Deadline deadline(kFinishes);
    CHECK(exitsWith(*a, 0, deadline.left(), {a.get(), b.get()}));
    CHECK(exitsWith(*b, 0, deadline.left(), {a.get(), b.get()}));

    // With a token: refused before it joins, at once, one line naming auth and token_file.
    const auto started = Clock::now();
    auto refused = agent("2", endpoints, "opentok2", until, "token_file=" + token);
    CHECK(exitsWith(*refused, 2, 20s));
    WARN("a token on an etcd without auth: exit 2 after " << secondsSince(started) << " s");
    CHECK(secondsSince(started) < 10.0);
    CHECK(countLines(refused->output(), "rank=") == 0);
    CHECK_THAT(
        badInputLine(*refused),
        Catch::Contains("this job has a token (--rdzv-conf token_file), but etcd at http://") &&
            Catch::Contains("serves clients with no user") &&
            Catch::Contains("turn etcd's auth on") &&
            Catch::Contains("username= and password_file="));
    CHECK(keysOf(open, "opentok2").empty());
  }

  EtcdCluster::Options clusterOptions;
  clusterOptions.members = 1;
  EtcdCluster closed(clusterOptions);
  closed.enableAuth("/ddprun/tokjob/", "alice", "alicepw");
  const std::string endpoints = closed.endpoints();
  const std::string password = writeFile(dir.path + "/alice.pw", "alicepw\n", 0600);
  const std::string conf = "token_file=" + token + ",username=alice,password_file=" + password;
  auto a = agent("2", endpoints, "tokjob", until, conf);
  auto b = agent("2", endpoints, "tokjob", until, conf);
  REQUIRE(reported({a.get(), b.get()}, "world=2 ", 2, kForms));
  CHECK_FALSE(forgeStop(closed, "tokjob"));
  // Nobody stops: both still run their workers a while after the forgery, then end as asked.
  CHECK_FALSE(a->wait(2s).has_value());
  CHECK_FALSE(b->wait(100ms).has_value());
  finishJob(until, {a.get(), b.get()}, kFinishes);
  CHECK(countLines(a->output() + b->output(), "world=2 ") == 2);  // the one round, no re-form
}

namespace {

// examples/train_ddp.py on 2 agents x 2 workers over a fresh 3-member etcd, checked by
// ddp_training.py (loss falls, identical parameters, checkpoint, exit 0).
void ddpTraining(const std::string& python) {
  EtcdCluster::skipUnlessInstalled();
  EtcdCluster cluster;
  Subprocess driver({DDPRUN_TORCH113_PYTHON,
                     std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/ddp_training.py", "--ddprun",
                     DDPRUN_BIN, "--python", python, "--scenario", "2nodes", "--etcd",
                     cluster.endpoints(), "--epochs", "2", "--timeout", "150"});
  const auto status = exitStatus(driver, 170s);
  REQUIRE(status.has_value());
  if (*status == 77) std::exit(77);  // no torch 2.6 chroot: skipped, as CTest reads it
  INFO(driver.describe(20000));
  CHECK(*status == 0);
  CHECK_THAT(driver.output(), Catch::Contains("over etcd"));
}

}  // namespace

TEST_CASE("etcd: DDP training, 2 agents x 2 workers, torch 1.13", "[torch113]") {
  ddpTraining(DDPRUN_TORCH113_PYTHON);
}

TEST_CASE("etcd: DDP training, 2 agents x 2 workers, torch 2.6", "[torch2]") {
  ddpTraining(DDPRUN_TORCH2_PYTHON);
}
