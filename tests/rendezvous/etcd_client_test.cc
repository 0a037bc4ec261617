// The etcd v3 client against a real etcd (Debian's etcd-server 3.4): a 3-member cluster on
// loopback, started once for the whole file (tests/support/etcd_cluster.h); the cases that kill,
// stop or cut off members heal it before and after. Labels integration;etcd; skipped (77)
// without /usr/bin/etcd. Every wait is bounded and says what it saw.
#include "ddprun/rendezvous/etcd_client.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "etcd/http_connection.h"
#include "etcd_cluster.h"
#include "ports.h"
#include "temp_dir.h"

using namespace ddprun::rendezvous::etcd;
using ddprun::test::EtcdCluster;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

EtcdCluster& cluster() {
  EtcdCluster::skipUnlessInstalled();
  static EtcdCluster shared;
  return shared;
}

EtcdClientOptions optionsFor(const std::string& endpoints, milliseconds timeout = 5s) {
  EtcdClientOptions options;
  options.endpoints = parseEtcdEndpoints(endpoints);
  options.timeout = timeout;
  return options;
}

Deadline in(milliseconds duration) { return Clock::now() + duration; }

long long millisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

std::string describe(const std::vector<WatchEvent>& events) {
  std::string out;
  for (const WatchEvent& event : events) {
    out += std::string(event.type == WatchEvent::Type::kPut ? "PUT " : "DELETE ") + event.kv.key +
           "=" + event.kv.value + " @" + std::to_string(event.kv.modRevision) + "; ";
  }
  return out.empty() ? "(no events)" : out;
}

// Events from `watch` until `enough` holds or `timeout` passes; a thrown error ends the wait
// and goes to `error`.
std::vector<WatchEvent> collect(EtcdWatch& watch,
                                const std::function<bool(const std::vector<WatchEvent>&)>& enough,
                                milliseconds timeout, std::string* error = nullptr) {
  std::vector<WatchEvent> events;
  const Deadline deadline = in(timeout);
  while (!enough(events) && Clock::now() < deadline) {
    try {
      if (auto batch = watch.next(deadline)) {
        for (WatchEvent& event : batch->events) events.push_back(std::move(event));
      }
    } catch (const EtcdError& e) {
      if (error == nullptr) throw;
      *error = std::string(codeName(e.code())) + ": " + e.what();
      break;
    }
  }
  return events;
}

auto atLeast(std::size_t count) {
  return [count](const std::vector<WatchEvent>& events) { return events.size() >= count; };
}

// The error `f` throws; fails the test when it throws none.
EtcdError errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const EtcdError& error) {
    return error;
  }
  FAIL("the call succeeded; an EtcdError was expected");
  throw std::logic_error("unreachable");
}

std::vector<int> leaderFirst(int leader, int members) {
  std::vector<int> order = {leader};
  for (int i = 0; i < members; ++i) {
    if (i != leader) order.push_back(i);
  }
  return order;
}

struct PemFiles {
  std::string certificate;
  std::string key;
};

// A self-signed certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1, which a client checks
// an address against) that is its own CA: etcd's serving certificate, the CA it trusts for
// client certificates, and the client's certificate at once.
PemFiles writeLoopbackCertificate(const std::string& dir, const std::string& name) {
  static long serial = 1;
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* certificate = X509_new();
  REQUIRE(key != nullptr);
  REQUIRE(certificate != nullptr);
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -60);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 24 * 3600);
  X509_set_pubkey(certificate, key);
  X509_NAME* subject = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(certificate, subject);
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, certificate, certificate, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                                   std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
    REQUIRE(extension != nullptr);
    X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
  }
  X509_sign(certificate, key, EVP_sha256());
  PemFiles files{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  FILE* out = std::fopen(files.certificate.c_str(), "w");
  PEM_write_X509(out, certificate);
  std::fclose(out);
  out = std::fopen(files.key.c_str(), "w");
  ::chmod(files.key.c_str(), 0600);
  PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(out);
  X509_free(certificate);
  EVP_PKEY_free(key);
  return files;
}

}  // namespace

TEST_CASE("kv: put, get, prefix range, count, limit, an old revision, delete a prefix") {
  EtcdClient client(optionsFor(cluster().endpoints()));
  const std::string binary("kv/\0\xff", 5);
  const PutResult first = client.put({"kv/a", "1"});
  CHECK(first.header.revision > 0);
  CHECK(first.header.memberId != 0);
  client.put({"kv/b", "2"});
  client.put({binary, std::string("\0v\xff", 3)});
  client.put({"kv0", "outside"});  // the prefix's range end itself: not in it
  const PutResult second = client.put({"kv/a", "one", 0, true});
  REQUIRE(second.prevKv);
  CHECK(second.prevKv->value == "1");

  const auto a = client.get("kv/a");
  REQUIRE(a);
  CHECK(a->value == "one");
  CHECK(a->version == 2);
  CHECK(a->createRevision == first.header.revision);
  CHECK(a->modRevision == second.header.revision);
  CHECK(a->lease == 0);
  CHECK_FALSE(client.get("kv/missing"));

  const RangeResult all = client.range({KeyRange::prefix("kv/")});
  REQUIRE(all.kvs.size() == 3);
  CHECK(all.kvs[0].key == binary);  // sorted by bytes: "\0" before "a"
  CHECK(all.kvs[0].value == std::string("\0v\xff", 3));
  CHECK(all.kvs[1].key == "kv/a");
  CHECK(all.kvs[2].key == "kv/b");
  CHECK(all.count == 3);
  CHECK_FALSE(all.more);

  const RangeResult counted = client.range({KeyRange::prefix("kv/"), 0, 0, true});
  CHECK(counted.kvs.empty());
  CHECK(counted.count == 3);
  const RangeResult limited = client.range({KeyRange::prefix("kv/"), 0, 1});
  CHECK(limited.kvs.size() == 1);
  CHECK(limited.more);
  CHECK(limited.count == 3);
  const RangeResult old = client.range({KeyRange::single("kv/a"), first.header.revision});
  REQUIRE(old.kvs.size() == 1);
  CHECK(old.kvs[0].value == "1");

  const DeleteResult deleted = client.deleteRange({KeyRange::prefix("kv/"), true});
  CHECK(deleted.deleted == 3);
  CHECK(deleted.prevKvs.size() == 3);
  CHECK(client.range({KeyRange::prefix("kv/")}).kvs.empty());
  CHECK(client.get("kv0")->value == "outside");
  client.deleteRange({KeyRange::single("kv0")});
}

TEST_CASE(
    "txn: create-if-absent from two racing clients (two threads each), exactly one wins each key; "
    "revision guards") {
  // Two clients, each starting at another member: the race is decided by etcd, not by a member.
  // Two threads share each client: one client serves calls from several threads at once.
  EtcdClient one(optionsFor(cluster().endpoints({0, 1, 2})));
  EtcdClient two(optionsFor(cluster().endpoints({2, 1, 0})));
  constexpr int kKeys = 20;
  constexpr int kRacers = 4;  // racers 0 and 2 use client one, 1 and 3 client two
  std::array<std::array<bool, kKeys>, kRacers> won{};
  std::array<std::array<std::string, kKeys>, kRacers> ownerSeen{};
  std::array<std::string, kRacers> errors;
  auto race = [&](EtcdClient& client, int me) {
    try {
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "txn/" + std::to_string(k);
        const TxnResult result = client.txn(Txn()
                                                .when(Compare::absent(key))
                                                .then(PutRequest{key, "racer" + std::to_string(me)})
                                                .otherwise(RangeRequest{KeyRange::single(key)}));
        won[me][k] = result.succeeded;
        if (!result.succeeded)
          ownerSeen[me][k] = std::get<RangeResult>(result.responses.at(0)).kvs.at(0).value;
      }
    } catch (const std::exception& error) {
      errors[me] = error.what();
    }
  };
  std::vector<std::thread> racers;
  for (int me = 0; me < kRacers; ++me)
    racers.emplace_back(race, std::ref(me % 2 == 0 ? one : two), me);
  for (std::thread& racer : racers) racer.join();
  for (const std::string& error : errors) REQUIRE(error.empty());
  std::array<int, kRacers> wins{};
  for (int k = 0; k < kKeys; ++k) {
    INFO("key txn/" << k);
    int winners = 0;
    int winner = -1;
    for (int me = 0; me < kRacers; ++me) {
      if (won[me][k]) {
        ++winners;
        winner = me;
      }
    }
    REQUIRE(winners == 1);
    ++wins[winner];
    for (int me = 0; me < kRacers; ++me) {
      if (me != winner) CHECK(ownerSeen[me][k] == "racer" + std::to_string(winner));
    }
    const auto stored = one.get("txn/" + std::to_string(k));
    REQUIRE(stored);
    CHECK(stored->value == "racer" + std::to_string(winner));
    CHECK(stored->version == 1);
  }
  std::cout << "txn race: keys won by racers 0-3: " << wins[0] << ", " << wins[1] << ", " << wins[2]
            << ", " << wins[3] << std::endl;

  // A guard on the key's mod revision: a stale one fails (and runs nothing), the current one
  // applies; a value guard.
  const auto kv = one.get("txn/0");
  const TxnResult stale =
      one.txn(Txn()
                  .when(Compare::modRevision("txn/0", Compare::Result::kEqual, kv->modRevision - 1))
                  .then(PutRequest{"txn/0", "x"}));
  CHECK_FALSE(stale.succeeded);
  CHECK(stale.responses.empty());
  CHECK_FALSE(stale.afterUncertainAttempt);
  const TxnResult fresh =
      one.txn(Txn()
                  .when(Compare::modRevision("txn/0", Compare::Result::kEqual, kv->modRevision))
                  .then(PutRequest{"txn/0", "x"}));
  CHECK(fresh.succeeded);
  REQUIRE(fresh.responses.size() == 1);
  CHECK(std::get<PutResult>(fresh.responses[0]).header.revision == fresh.header.revision);
  const TxnResult byValue =
      one.txn(Txn()
                  .when(Compare::value("txn/0", Compare::Result::kEqual, "x"))
                  .when(Compare::version("txn/0", Compare::Result::kGreater, 1))
                  .then(DeleteRequest{KeyRange::prefix("txn/")}));
  CHECK(byValue.succeeded);
  CHECK(std::get<DeleteResult>(byValue.responses.at(0)).deleted == kKeys);
}

TEST_CASE(
    "lease: keep-alive keeps a leased key; unrenewed, the key goes within its TTL and a watch sees "
    "the DELETE") {
  EtcdClient client(optionsFor(cluster().endpoints()));
  // etcd raises a TTL below its minimum (1.5 election timeouts: 2 s with the defaults).
  CHECK(client.grantLease(1).ttlSeconds == 2);

  const LeaseGrant lease = client.grantLease(2);
  CHECK(lease.ttlSeconds == 2);
  client.put({"lease/held", "x", lease.id});
  REQUIRE(client.get("lease/held"));
  CHECK(client.get("lease/held")->lease == lease.id);
  // Renewed every 500 ms for 5 s, well past its TTL: the key stays.
  const auto renewing = Clock::now();
  int renewals = 0;
  while (Clock::now() < renewing + 5s) {
    CHECK(client.keepAliveOnce(lease.id).ttlSeconds == 2);
    ++renewals;
    std::this_thread::sleep_for(500ms);
  }
  CHECK(client.get("lease/held"));
  const LeaseTimeToLive ttl = client.leaseTimeToLive(lease.id, true);
  CHECK(ttl.grantedTtlSeconds == 2);
  CHECK(ttl.ttlSeconds >= 0);
  CHECK(ttl.ttlSeconds <= 2);
  CHECK(ttl.keys == std::vector<std::string>{"lease/held"});

  // The last renewal; then none. The server ends the lease at least a TTL after it got that
  // renewal, which is after it was sent.
  auto watch = client.watch({KeyRange::single("lease/held"), 0, true});
  const auto lastRenewal = Clock::now();
  client.keepAliveOnce(lease.id);
  const auto events = collect(*watch, atLeast(1), 10s);
  const auto gone = millisecondsSince(lastRenewal);
  INFO("after " << renewals << " renewals, the watch saw " << describe(events) << " " << gone
                << " ms after the last renewal (TTL 2 s)");
  std::cout << "lease: the leased key's DELETE came " << gone
            << " ms after the last renewal (TTL 2 s)" << std::endl;
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == WatchEvent::Type::kDelete);
  CHECK(events[0].kv.key == "lease/held");
  REQUIRE(events[0].prevKv);
  CHECK(events[0].prevKv->lease == lease.id);
  CHECK(gone >= 2000);
  CHECK(gone <= 2000 + 3000);  // the lessor looks every 500 ms; the revoke is one raft round
  CHECK_FALSE(client.get("lease/held"));
  CHECK(errorOf([&] { client.keepAliveOnce(lease.id); }).code() == EtcdError::Code::kNotFound);
  CHECK(client.leaseTimeToLive(lease.id).ttlSeconds == -1);

  // Revoked: its keys go at once; a second revoke finds nothing.
  const LeaseGrant revoked = client.grantLease(30);
  client.put({"lease/revoked", "y", revoked.id});
  client.revokeLease(revoked.id);
  CHECK_FALSE(client.get("lease/revoked"));
  const EtcdError again = errorOf([&] { client.revokeLease(revoked.id); });
  CHECK(again.code() == EtcdError::Code::kNotFound);
  CHECK(again.grpcCode() == 5);
}

TEST_CASE("watch: from a revision, every event since in order with prev_kv, then live ones") {
  EtcdClient client(optionsFor(cluster().endpoints()));
  const Revision start = client.put({"watch/a", "1"}).header.revision;
  client.put({"watch/b", "2"});
  client.deleteRange({KeyRange::single("watch/a")});
  client.put({"watch/b", "3"});
  client.put({"watchX", "not in the prefix"});
  auto watch = client.watch({KeyRange::prefix("watch/"), start, true});
  auto events = collect(*watch, atLeast(4), 10s);
  INFO("seen: " << describe(events));
  REQUIRE(events.size() == 4);
  CHECK(events[0].type == WatchEvent::Type::kPut);
  CHECK(events[0].kv.key == "watch/a");
  CHECK(events[0].kv.modRevision == start);
  CHECK_FALSE(events[0].prevKv);  // it had none
  CHECK(events[1].kv.key == "watch/b");
  CHECK(events[2].type == WatchEvent::Type::kDelete);
  CHECK(events[2].kv.key == "watch/a");
  REQUIRE(events[2].prevKv);
  CHECK(events[2].prevKv->value == "1");
  CHECK(events[3].kv.value == "3");
  REQUIRE(events[3].prevKv);
  CHECK(events[3].prevKv->value == "2");
  for (std::size_t i = 1; i < events.size(); ++i)
    CHECK(events[i].kv.modRevision > events[i - 1].kv.modRevision);
  CHECK(watch->nextRevision() == events.back().kv.modRevision + 1);

  const Revision live = client.put({"watch/c", "4"}).header.revision;
  events = collect(*watch, atLeast(1), 10s);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kv.key == "watch/c");
  CHECK(events[0].kv.modRevision == live);
  CHECK_FALSE(watch->next(in(300ms)));  // nothing more
  CHECK(watch->resumes() == 0);
  client.deleteRange({KeyRange::prefix("watch")});
}

TEST_CASE(
    "watch: a stream with no message of its own for remakeAfterSilence is made again from where it "
    "was, "
    "on the member that answers, losing nothing") {
  EtcdCluster& c = cluster();
  EtcdClient client(optionsFor(c.endpoints()));
  const Revision before = client.put({"quiet/a", "1"}).header.revision;
  WatchRequest request{KeyRange::prefix("quiet/"), before + 1};
  request.checkAfterSilence = 500ms;
  request.remakeAfterSilence = 1500ms;
  auto watch = client.watch(request);
  const std::string member = watch->endpoint();
  // 2.2 s of silence on the stream while the same client's reads are answered every 200 ms (by
  // the member the watch streams from: the one that answered last): remade once, on that member.
  std::atomic<bool> reading{true};
  std::thread reads([&] {
    for (int i = 0; i < 50 && reading; ++i) {  // bounded: 10 s at most
      try {
        client.get("quiet/a");
      } catch (const EtcdError&) {
      }
      std::this_thread::sleep_for(200ms);
    }
  });
  CHECK_FALSE(watch->next(in(2200ms)));
  reading = false;
  reads.join();
  CHECK(watch->resumes() == 1);
  CHECK(watch->endpoint() == member);
  // Nothing was lost or doubled by the remake: the writes after it arrive once, in order.
  const Revision first = client.put({"quiet/b", "2"}).header.revision;
  client.put({"quiet/b", "3"});
  auto events = collect(*watch, atLeast(2), 10s);
  INFO("seen: " << describe(events));
  REQUIRE(events.size() == 2);
  CHECK(events[0].kv.modRevision == first);
  CHECK(events[1].kv.value == "3");
  CHECK_FALSE(watch->next(in(300ms)));
  client.deleteRange({KeyRange::prefix("quiet/")});
}

TEST_CASE("watch: from a compacted revision is reported as compacted at R; re-range and re-watch") {
  EtcdClient client(optionsFor(cluster().endpoints()));
  const Revision old = client.put({"compact/a", "1"}).header.revision;
  const Revision now = client.put({"compact/a", "2"}).header.revision;
  client.compact(now);
  // etcd creates the watch, then cancels it with compact_revision: the first next() says so.
  const EtcdError compacted = errorOf([&] {
    auto watch = client.watch({KeyRange::prefix("compact/"), old});
    watch->next(in(5s));
  });
  INFO(compacted.what());
  CHECK(compacted.code() == EtcdError::Code::kCompacted);
  CHECK(compacted.compactRevision() == now);
  // A range at a compacted revision: OutOfRange, the same code.
  const EtcdError range = errorOf([&] { client.range({KeyRange::single("compact/a"), old}); });
  CHECK(range.code() == EtcdError::Code::kCompacted);
  CHECK(range.grpcCode() == 11);

  // What the caller does: read again, and watch from after the revision read.
  const RangeResult current = client.range({KeyRange::prefix("compact/")});
  REQUIRE(current.kvs.size() == 1);
  CHECK(current.kvs[0].value == "2");
  auto watch = client.watch({KeyRange::prefix("compact/"), current.header.revision + 1});
  client.put({"compact/a", "3"});
  const auto events = collect(*watch, atLeast(1), 10s);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kv.value == "3");
  client.deleteRange({KeyRange::prefix("compact/")});
}

TEST_CASE(
    "endpoints that are no etcd: a peer port is a bad response, a silent listener costs its "
    "share") {
  EtcdCluster& c = cluster();
  const std::string member = c.endpoints({1});
  std::uint16_t silentPort = 0;
  const int silent = ddprun::test::listenOnLoopback(silentPort);  // accepts, never answers
  {
    // A member's peer port answers HTTP (its /version too), but not the v3 gateway.
    EtcdClient client(optionsFor("127.0.0.1:" + std::to_string(c.peerPort(1)), 3s));
    const auto started = Clock::now();
    const EtcdError error = errorOf([&] { client.get("k"); });
    INFO(error.what());
    CHECK(error.code() == EtcdError::Code::kBadResponse);
    CHECK(millisecondsSince(started) < 2000);  // no second round: it will not become etcd
  }
  {
    EtcdClient client(optionsFor("127.0.0.1:" + std::to_string(silentPort) + "," + member, 4s));
    const auto started = Clock::now();
    client.put({"silent/k", "v"});
    const auto firstCall = millisecondsSince(started);
    std::cout << "a silent first member: the put succeeded via the second after " << firstCall
              << " ms (deadline 4000 ms, its share 2000 ms)" << std::endl;
    CHECK(firstCall >= 2000);
    CHECK(firstCall < 4000);
    // The next call starts at the member that answered.
    const auto again = Clock::now();
    CHECK(client.get("silent/k")->value == "v");
    CHECK(millisecondsSince(again) < 1500);
    client.deleteRange({KeyRange::single("silent/k")});
  }
  ::close(silent);
}

TEST_CASE(
    "fail-over: with the first listed member killed, calls succeed via another; the error names "
    "every member") {
  EtcdCluster& c = cluster();
  c.heal();
  c.kill(0);
  // 10 s: if member 0 led, the others elect a new leader first (answering "no leader" meanwhile).
  EtcdClient client(optionsFor(c.endpoints({0, 1, 2}), 10s));
  const auto started = Clock::now();
  client.put({"failover/k", "v"});
  std::cout << "fail-over: the put with the first member killed took " << millisecondsSince(started)
            << " ms" << std::endl;
  CHECK(client.get("failover/k")->value == "v");
  const TxnResult txn =
      client.txn(Txn().when(Compare::absent("failover/new")).then(PutRequest{"failover/new", "n"}));
  CHECK(txn.succeeded);
  CHECK_FALSE(txn.afterUncertainAttempt);  // refused connections sent nothing
  const LeaseGrant lease = client.grantLease(10);
  CHECK(client.keepAliveOnce(lease.id).ttlSeconds == 10);
  client.revokeLease(lease.id);
  auto watch = client.watch({KeyRange::prefix("failover/")});
  CHECK(watch->endpoint() != c.clientUrl(0));

  // Asked alone, the killed member is unreachable, and the error says which and why.
  EtcdClient alone(optionsFor(c.endpoints({0}), 1s));
  const EtcdError unreachable = errorOf([&] { alone.get("failover/k"); });
  INFO(unreachable.what());
  CHECK(unreachable.code() == EtcdError::Code::kUnreachable);
  CHECK(std::string(unreachable.what()).find(c.clientUrl(0)) != std::string::npos);
  CHECK(std::string(unreachable.what()).find("connection refused") != std::string::npos);
  // When all fail, each is named with what it said.
  const std::string nobody = "127.0.0.1:" + std::to_string(ddprun::test::freePort());
  EtcdClient none(optionsFor(c.endpoints({0}) + "," + nobody, 1s));
  const EtcdError both = errorOf([&] { none.get("failover/k"); });
  INFO(both.what());
  CHECK(both.code() == EtcdError::Code::kUnreachable);
  CHECK(std::string(both.what()).find(c.clientUrl(0) + ": cannot connect") != std::string::npos);
  CHECK(std::string(both.what()).find("http://" + nobody + ": cannot connect") !=
        std::string::npos);
  CHECK(std::string(both.what()).find('\n') == std::string::npos);

  client.deleteRange({KeyRange::prefix("failover/")});
  c.heal();
}

TEST_CASE(
    "watch: SIGKILL of the leader mid-watch; the watch resumes on another member, every event "
    "once") {
  EtcdCluster& c = cluster();
  c.heal();
  const int leader = c.leader(10s);
  REQUIRE(leader >= 0);
  const std::vector<int> order = leaderFirst(leader, c.size());
  EtcdClient watcher(optionsFor(c.endpoints(order), 10s));
  EtcdClient writer(optionsFor(c.endpoints({order[1], order[2]}), 10s));
  auto watch = watcher.watch({KeyRange::prefix("leader/")});
  REQUIRE(watch->endpoint() == c.clientUrl(leader));
  writer.put({"leader/1", "a"});
  auto events = collect(*watch, atLeast(1), 10s);
  REQUIRE(events.size() == 1);

  c.kill(leader);
  const auto killed = Clock::now();
  writer.put(
      {"leader/2", "b"});  // after the new leader is elected (the writer fails over until then)
  const auto written = millisecondsSince(killed);
  writer.put({"leader/3", "c"});
  std::string error;
  events = collect(
      *watch,
      [](const std::vector<WatchEvent>& seen) {
        return !seen.empty() && seen.back().kv.key == "leader/3";
      },
      20s, &error);
  INFO("seen: " << describe(events) << "; error: " << error << "; resumes " << watch->resumes()
                << ", now on " << watch->endpoint());
  std::cout << "leader killed: a write succeeded " << written << " ms later; the watch resumed on "
            << watch->endpoint() << " and had both events " << millisecondsSince(killed)
            << " ms after the kill" << std::endl;
  REQUIRE(error.empty());
  REQUIRE(events.size() == 2);
  CHECK(events[0].kv.key == "leader/2");
  CHECK(events[1].kv.key == "leader/3");
  CHECK(watch->resumes() >= 1);
  CHECK(watch->endpoint() != c.clientUrl(leader));
  writer.deleteRange({KeyRange::prefix("leader/")});
  c.heal();
}

TEST_CASE(
    "hasleader: a member cut off from the others answers unavailable, not stale data; its watch "
    "resumes after healing") {
  EtcdCluster& c = cluster();
  c.heal();
  EtcdClient client(optionsFor(c.endpoints(), 10s));
  client.put({"cut/k", "before"});
  // A watch on member 0 (listed first), made before the cut.
  auto watch = client.watch({KeyRange::prefix("cut/")});
  REQUIRE(watch->endpoint() == c.clientUrl(0));

  c.stop(1);
  c.stop(2);
  const auto cut = Clock::now();
  // Member 0 loses its leader within an election timeout or two (1 s each); until then a
  // linearizable read waits for a quorum and runs out its deadline.
  EtcdClient alone(optionsFor(c.endpoints({0}), 2s));
  std::optional<EtcdError> refused;
  std::string lastSeen;
  while (!refused && Clock::now() < cut + 15s) {
    try {
      alone.get("cut/k");
      lastSeen = "a read succeeded";
    } catch (const EtcdError& error) {
      if (error.code() == EtcdError::Code::kUnavailable) refused = error;
      lastSeen = std::string(codeName(error.code())) + ": " + error.what();
    }
  }
  INFO("last seen: " << lastSeen << "\n" << c.describe());
  REQUIRE(refused);
  CHECK(refused->grpcCode() == 14);
  std::cout << "cut off: member 0 answered '" << refused->what() << "' " << millisecondsSince(cut)
            << " ms after the others stopped" << std::endl;

  // The same member without the header, over raw HTTP: a serializable read serves its own copy
  // (stale, for all it knows), a linearizable one gets no answer; with the header, both are
  // refused at once.
  const EtcdEndpoint zero{EtcdEndpoint::Scheme::kHttp, "127.0.0.1", c.clientPort(0)};
  const std::string serializable = R"({"key":"Y3V0L2s=","serializable":true})";  // "cut/k"
  {
    HttpConnection raw(zero, nullptr, in(2s));
    const HttpResponse stale = raw.exchange(true, "/v3/kv/range", serializable, {}, in(2s));
    INFO(stale.body);
    CHECK(stale.status == 200);
    CHECK(stale.body.find("YmVmb3Jl") != std::string::npos);  // "before"
  }
  {
    HttpConnection raw(zero, nullptr, in(2s));
    const HttpResponse refusedRaw = raw.exchange(true, "/v3/kv/range", serializable,
                                                 {{"Grpc-Metadata-hasleader", "true"}}, in(2s));
    INFO(refusedRaw.body);
    CHECK(refusedRaw.status == 503);
    CHECK(refusedRaw.body.find("\"code\":14") != std::string::npos);
  }
  {
    HttpConnection raw(zero, nullptr, in(2s));
    CHECK_THROWS_AS(raw.exchange(true, "/v3/kv/range", R"({"key":"Y3V0L2s="})", {}, in(1500ms)),
                    TransportError);
  }
  {
    // A watch: created without the header (it would wait for events that never come), refused
    // with it (503 and one stream error).
    const std::string create = R"({"create_request":{"key":"Y3V0L2s="}})";
    std::string body;
    HttpConnection without(zero, nullptr, in(2s));
    CHECK(without.startStream("/v3/watch", create, {}, in(2s), body) == 200);
    CHECK(without.readStream(in(2s)).find("\"created\":true") != std::string::npos);
    HttpConnection with(zero, nullptr, in(2s));
    CHECK(with.startStream("/v3/watch", create, {{"Grpc-Metadata-hasleader", "true"}}, in(2s),
                           body) == 503);
    CHECK(body.find("\"grpc_code\":14") != std::string::npos);
  }

  // The watch: etcd ends a hasleader stream once its member has had no leader for a few
  // election timeouts; no other member answers (stopped), so next() says so by its deadline,
  // naming every member.
  const EtcdError lost = errorOf([&] {
    while (watch->next(in(8s))) {
    }
    throw EtcdError(EtcdError::Code::kTimeout, "the watch stayed quiet for 8 s");
  });
  INFO(lost.what());
  std::cout << "cut off: the watch said " << codeName(lost.code()) << ": " << lost.what()
            << std::endl;
  CHECK(lost.code() == EtcdError::Code::kUnavailable);  // member 0 said "no leader"
  for (int i = 0; i < c.size(); ++i)
    CHECK(std::string(lost.what()).find(c.clientUrl(i)) != std::string::npos);

  // Healed: the write made now reaches the same watch object, resumed from where it was. The
  // put runs while the members elect a leader: an attempt cut at attemptTimeout may still be
  // applied after the election, so the put may land more than once, and then says so.
  c.resume(1);
  c.resume(2);
  const PutResult after = client.put({"cut/k", "after"});
  std::string error;
  auto events = collect(*watch, atLeast(1), 20s, &error);
  // Anything more of the same put comes within a moment.
  for (auto more = watch->next(in(1s)); more; more = watch->next(in(1s))) {
    for (WatchEvent& event : more->events) events.push_back(std::move(event));
  }
  INFO("seen: " << describe(events) << "; error: " << error
                << "; the put after an uncertain attempt: " << after.afterUncertainAttempt);
  std::cout << "healed: the put landed " << events.size() << " time(s)"
            << (after.afterUncertainAttempt ? " (after an uncertain attempt)" : "") << std::endl;
  REQUIRE(!events.empty());
  for (const WatchEvent& event : events) {
    CHECK(event.type == WatchEvent::Type::kPut);
    CHECK(event.kv.value == "after");
  }
  CHECK((events.size() == 1 || after.afterUncertainAttempt));
  CHECK(std::any_of(events.begin(), events.end(), [&](const WatchEvent& event) {
    return event.kv.modRevision == after.header.revision;
  }));
  CHECK(watch->resumes() >= 1);
  client.deleteRange({KeyRange::prefix("cut/")});
  c.heal();
}

TEST_CASE(
    "auth: a token from user and password, renewed once etcd forgets it, taken once by calls that "
    "need it together; denied and wrong credentials") {
  EtcdCluster::skipUnlessInstalled();
  // One member of its own, with simple tokens forgotten after 1 s of disuse (300 s by default).
  EtcdCluster::Options clusterOptions;
  clusterOptions.members = 1;
  clusterOptions.extraArguments = {"--auth-token-ttl=1"};
  EtcdCluster secured(clusterOptions);
  secured.enableAuth("job/", "alice", "alicepw");

  EtcdClientOptions options = optionsFor(secured.endpoints());
  options.credentials = EtcdCredentials{"alice", "alicepw"};
  EtcdClient client(options);
  client.put({"job/k", "v"});
  CHECK(client.get("job/k")->value == "v");
  const EtcdError denied = errorOf([&] { client.put({"elsewhere", "v"}); });
  CHECK(denied.code() == EtcdError::Code::kAuth);
  CHECK(denied.grpcCode() == 7);

  // The wire fact behind the renewal: a token unused for longer than the TTL is unknown
  // (Unauthenticated, 16).
  const EtcdEndpoint member{EtcdEndpoint::Scheme::kHttp, "127.0.0.1", secured.clientPort(0)};
  HttpConnection raw(member, nullptr, in(2s));
  const HttpResponse authenticated = raw.exchange(
      true, "/v3/auth/authenticate", R"({"name":"alice","password":"alicepw"})", {}, in(2s));
  const std::string token =
      nlohmann::json::parse(authenticated.body).at("token").get<std::string>();
  std::this_thread::sleep_for(3s);
  const HttpResponse forgotten = raw.exchange(true, "/v3/kv/range", R"({"key":"am9iL2s="})",
                                              {{"Authorization", token}}, in(2s));
  INFO(forgotten.body);
  CHECK(forgotten.body.find("\"code\":16") != std::string::npos);
  // The client's token lapsed the same way: it gets a new one and the call succeeds.
  CHECK(client.get("job/k")->value == "v");
  auto watch = client.watch({KeyRange::prefix("job/")});
  client.put({"job/k", "w"});
  const auto events = collect(*watch, atLeast(1), 10s);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kv.value == "w");

  // Calls that find the token missing together authenticate once (a read's transactions go
  // several at once): 8 threads' first calls on a fresh client, counted by etcd itself.
  const auto authentications = [&] {
    HttpConnection metrics(member, nullptr, in(2s));
    const HttpResponse page = metrics.exchange(false, "/metrics", "", {}, in(2s));
    double count = 0;
    std::istringstream lines(page.body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("grpc_server_started_total{", 0) == 0 &&
          line.find("grpc_method=\"Authenticate\"") != std::string::npos) {
        count += std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return count;
  };
  const double authenticatedBefore = authentications();
  EtcdClient burst(options);
  std::atomic<int> served{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      try {
        if (burst.get("job/k")) ++served;
      } catch (const EtcdError&) {
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  CHECK(served == 8);
  CHECK(authentications() - authenticatedBefore == 1);

  // A wrong password: an auth error that does not show the password.
  options.credentials = EtcdCredentials{"alice", "not-the-password"};
  EtcdClient wrong(options);
  const EtcdError refused = errorOf([&] { wrong.get("job/k"); });
  INFO(refused.what());
  CHECK(refused.code() == EtcdError::Code::kAuth);
  CHECK(std::string(refused.what()).find("not-the-password") == std::string::npos);
  // No credentials for an etcd with auth: etcd says "user name is empty" (InvalidArgument).
  EtcdClient anonymous(optionsFor(secured.endpoints()));
  const EtcdError anonymousError = errorOf([&] { anonymous.get("job/k"); });
  INFO(anonymousError.what());
  CHECK(anonymousError.code() == EtcdError::Code::kRejected);
  CHECK(anonymousError.grpcCode() == 3);
}

TEST_CASE(
    "tls: https with the member's CA and a client certificate; a wrong CA, no certificate, plain "
    "http fail") {
  EtcdCluster::skipUnlessInstalled();
  ddprun::test::TempDir dir;  // outlives the cluster
  const PemFiles good = writeLoopbackCertificate(dir.path, "etcd");
  const PemFiles other = writeLoopbackCertificate(dir.path, "other");
  EtcdCluster::Options clusterOptions;
  clusterOptions.members = 1;
  clusterOptions.tlsCertificate = good.certificate;
  clusterOptions.tlsKey = good.key;
  EtcdCluster secured(clusterOptions);

  EtcdClientOptions options = optionsFor(secured.endpoints());
  REQUIRE(options.endpoints.at(0).scheme == EtcdEndpoint::Scheme::kHttps);
  options.tls = {good.certificate, good.certificate, good.key};
  EtcdClient client(options);
  client.put({"tls/k", "v"});
  CHECK(client.get("tls/k")->value == "v");
  auto watch = client.watch({KeyRange::prefix("tls/")});
  client.put({"tls/k", "w"});
  const auto events = collect(*watch, atLeast(1), 10s);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kv.value == "w");

  // A member whose certificate the client's CA did not sign. (These calls go round until their
  // deadline, as for any member that cannot be reached: 1 s here.)
  options.timeout = 1s;
  options.tls = {other.certificate, good.certificate, good.key};
  EtcdClient untrusting(options);
  const EtcdError untrusted = errorOf([&] { untrusting.get("tls/k"); });
  INFO(untrusted.what());
  CHECK(untrusted.code() == EtcdError::Code::kUnreachable);
  CHECK(std::string(untrusted.what()).find("TLS handshake failed") != std::string::npos);
  CHECK(std::string(untrusted.what()).find("certificate verify failed") != std::string::npos);

  // No client certificate for a member that asks for one.
  options.tls = {good.certificate, "", ""};
  EtcdClient anonymous(options);
  const EtcdError refused = errorOf([&] { anonymous.get("tls/k"); });
  INFO(refused.what());
  CHECK(refused.code() == EtcdError::Code::kUnreachable);

  // Plain http to the https member: etcd closes the connection without a word.
  EtcdClient plain(optionsFor("127.0.0.1:" + std::to_string(secured.clientPort(0)), 1s));
  const EtcdError notTls = errorOf([&] { plain.get("tls/k"); });
  INFO(notTls.what());
  CHECK(notTls.code() == EtcdError::Code::kUnreachable);
  CHECK(std::string(notTls.what()).find("closed the connection") != std::string::npos);

  // TLS files that cannot be used: one line at construction, naming the file.
  options.tls = {dir.path + "/missing.crt", "", ""};
  const EtcdError missing = errorOf([&] { EtcdClient unused(options); });
  CHECK(missing.code() == EtcdError::Code::kRejected);
  CHECK(std::string(missing.what()).find("missing.crt") != std::string::npos);
  ::chmod(good.key.c_str(), 0644);
  options.tls = {good.certificate, good.certificate, good.key};
  const EtcdError exposed = errorOf([&] { EtcdClient unused(options); });
  INFO(exposed.what());
  CHECK(exposed.code() == EtcdError::Code::kRejected);
  CHECK(std::string(exposed.what()).find("chmod 600") != std::string::npos);
}
