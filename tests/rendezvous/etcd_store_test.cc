// EtcdStore against a real etcd (Debian's etcd-server 3.4): what only the etcd backend has,
// beyond the conformance suite (store_conformance_etcd_test): a hold lapsing when its lease
// expires, two stores racing a hold, release by the holder only, the lease revoked on close, a
// leader lost mid-wait, an unreachable etcd, one request per renewal (counted by a forwarder in
// front of a member), and listing and deleting that never leave the store's prefix. One
// 3-member cluster for the whole file; the case that kills the leader heals it. Labels
// integration;etcd; skipped (77) without /usr/bin/etcd. Every wait is bounded.
#include "ddprun/rendezvous/etcd_store.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "etcd_cluster.h"
#include "ports.h"

using namespace ddprun::rendezvous;
using ddprun::test::EtcdCluster;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

EtcdCluster& cluster() {
  EtcdCluster::skipUnlessInstalled();
  static EtcdCluster shared;
  return shared;
}

std::shared_ptr<etcd::EtcdClient> clientFor(const std::string& endpoints,
                                            milliseconds timeout = 5s) {
  etcd::EtcdClientOptions options;
  options.endpoints = etcd::parseEtcdEndpoints(endpoints);
  options.timeout = timeout;
  return std::make_shared<etcd::EtcdClient>(options);
}

// A prefix of this case's own.
std::string freshPrefix(const std::string& name) {
  static int cases = 0;
  return "/ddprun-etcd-store/" + std::to_string(::getpid()) + "-" + std::to_string(++cases) + "/" +
         name + "/";
}

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

// A TCP forwarder on 127.0.0.1 to one etcd member that notes the request line of every HTTP
// request passing through it ("POST /v3/lease/keepalive"). Request lines are found in the client's
// byte stream by their form: the bodies are JSON with base64 keys and values, which never hold
// "POST /" or "GET /". It can also fail requests of one kind mid-exchange (fail()): drop the
// request unsent, or forward it and cut the connection before the answer (an applied write whose
// answer is lost), so that the client's attempt ends with its outcome unknown.
class CountingProxy {
 public:
  explicit CountingProxy(std::uint16_t target) : target_(target) {
    listener_ = ddprun::test::listenOnLoopback(port_);
    REQUIRE(::pipe(wake_) == 0);
    thread_ = std::thread([this] { run(); });
  }
  ~CountingProxy() {
    stop_ = true;
    (void)!::write(wake_[1], "x", 1);
    thread_.join();
    for (const Pair& pair : pairs_) {
      ::close(pair.client);
      ::close(pair.server);
    }
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

  enum class Fault { kNone, kDropRequest, kCutAnswer };
  // The next `times` requests whose line is `line` ("POST /v3/kv/txn") meet `fault`.
  void fail(Fault fault, std::string line, int times) {
    std::lock_guard lock(mutex_);
    fault_ = fault;
    faultLine_ = std::move(line);
    faultsLeft_ = times;
  }
  // How many of the requests fail() named have not met their fault yet.
  int faultsLeft() {
    std::lock_guard lock(mutex_);
    return faultsLeft_;
  }

 private:
  struct Pair {
    int client;
    int server;
    std::string pending;     // client bytes not yet scanned for request lines
    bool cutAnswer = false;  // close instead of forwarding the server's next bytes
  };

  static bool sendAll(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
      if (sent <= 0) return false;
      data += sent;
      size -= static_cast<std::size_t>(sent);
    }
    return true;
  }

  // Notes the request lines in the client's bytes; the fault that one of them meets, if any.
  Fault scan(Pair& pair) {
    Fault met = Fault::kNone;
    for (;;) {
      std::size_t start = std::string::npos;
      for (const char* method : {"POST /", "GET /"})
        start = std::min(start, pair.pending.find(method));
      if (start == std::string::npos) {
        if (pair.pending.size() > 16) pair.pending.erase(0, pair.pending.size() - 16);
        return met;
      }
      const std::size_t end = pair.pending.find(" HTTP/1.1\r\n", start);
      if (end == std::string::npos) {
        pair.pending.erase(0, start);
        return met;
      }
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(pair.pending.substr(start, end - start));
        if (faultsLeft_ > 0 && requests_.back() == faultLine_) {
          --faultsLeft_;
          met = fault_;
        }
      }
      pair.pending.erase(0, end);
    }
  }

  void run() {
    while (!stop_) {
      std::vector<pollfd> fds = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (const Pair& pair : pairs_) {
        fds.push_back({pair.client, POLLIN, 0});
        fds.push_back({pair.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        address.sin_port = htons(target_);
        if (client >= 0 &&
            ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
          pairs_.push_back({client, server, {}});
        } else {
          if (client >= 0) ::close(client);
          ::close(server);
        }
        continue;  // the pair list changed: poll again
      }
      std::vector<std::size_t> closed;
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        Pair& pair = pairs_[i];
        char buffer[65536];
        bool open = true;
        if (fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) {
          const ssize_t got = ::recv(pair.client, buffer, sizeof buffer, 0);
          Fault fault = Fault::kNone;
          if (got > 0) {
            pair.pending.append(buffer, static_cast<std::size_t>(got));
            fault = scan(pair);
          }
          if (fault == Fault::kCutAnswer) pair.cutAnswer = true;
          if (got <= 0 || fault == Fault::kDropRequest ||
              !sendAll(pair.server, buffer, static_cast<std::size_t>(got))) {
            open = false;
          }
        }
        if (open && (fds[3 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR))) {
          const ssize_t got = ::recv(pair.server, buffer, sizeof buffer, 0);
          if (got <= 0 || pair.cutAnswer ||
              !sendAll(pair.client, buffer, static_cast<std::size_t>(got))) {
            open = false;
          }
        }
        if (!open) closed.push_back(i);
      }
      for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
        ::close(pairs_[*it].client);
        ::close(pairs_[*it].server);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(*it));
      }
    }
  }

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Pair> pairs_;  // the forwarding thread's alone
  std::mutex mutex_;         // guards what follows
  std::vector<std::string> requests_;
  Fault fault_ = Fault::kNone;
  std::string faultLine_;
  int faultsLeft_ = 0;
};

}  // namespace

TEST_CASE(
    "a hold lapses when its lease expires: the key goes within the TTL plus 1 s, a watcher "
    "is woken, and the holder's next renewal says it is lost",
    "[etcd_store][hold]") {
  auto client = clientFor(cluster().endpoints());
  const std::string prefix = freshPrefix("lapse");
  EtcdStore holder(client, prefix);
  EtcdStore watcher(client, prefix);
  REQUIRE(holder.hold("alive/1", "n1", 1000ms, "ignored", "ignored") == "n1");
  REQUIRE(holder.leaseTtl().has_value());
  const auto ttl = *holder.leaseTtl();
  CHECK(ttl >= 1s);  // etcd raises a 1 s TTL to its minimum (2 s with the default election)
  // Renewed: the acknowledged send time moves on.
  const auto granted = *holder.lastAcknowledgedRenewalSent();
  std::this_thread::sleep_for(200ms);
  REQUIRE(holder.hold("alive/1", "n1", 1000ms, "", "") == "n1");
  const auto lastRenewal = *holder.lastAcknowledgedRenewalSent();
  CHECK(lastRenewal > granted);
  CHECK(watcher.check({"alive/1"}));

  // No more renewals: the lease runs out, etcd deletes the key, the watcher sees it.
  std::vector<std::string> missing;
  Clock::time_point woken;
  std::thread watching([&] {
    missing = watcher.waitForAnyMissing({"alive/1"}, 20s);
    woken = Clock::now();
  });
  watching.join();
  CHECK(missing == std::vector<std::string>{"alive/1"});
  const auto afterRenewal = std::chrono::duration_cast<milliseconds>(woken - lastRenewal);
  INFO("woken " << afterRenewal.count() << " ms after the last acknowledged renewal was sent, TTL "
                << ttl.count() << " s");
  std::cout << "figure: the held key's deletion reached a watcher " << afterRenewal.count()
            << " ms after the last acknowledged renewal was sent (lease TTL " << ttl.count()
            << " s)" << std::endl;
  CHECK(afterRenewal >= ttl - 100ms);  // not before the lease could have run out
  CHECK(afterRenewal <= ttl + 1s);
  CHECK_FALSE(watcher.check({"alive/1"}));
  CHECK_THROWS_AS(holder.hold("alive/1", "n1", 1000ms, "", ""), StoreConnectionError);
  // A later hold starts a new lease (a node that rejoins).
  CHECK(holder.hold("alive/1", "n1", 1000ms, "", "") == "n1");
  CHECK(watcher.check({"alive/1"}));
}

TEST_CASE("two stores race for a hold: one holds it, the other is told the holder's value",
          "[etcd_store][hold]") {
  const std::string prefix = freshPrefix("race");
  for (int round = 0; round < 5; ++round) {
    EtcdStore a(clientFor(cluster().endpoints()), prefix);
    EtcdStore b(clientFor(cluster().endpoints()), prefix);
    const std::string key = "leader/" + std::to_string(round);
    std::atomic<bool> go{false};
    std::string gotA;
    std::string gotB;
    std::thread ta([&] {
      while (!go) std::this_thread::yield();
      gotA = a.hold(key, "a", 10s, "", "");
    });
    std::thread tb([&] {
      while (!go) std::this_thread::yield();
      gotB = b.hold(key, "b", 10s, "", "");
    });
    go = true;
    ta.join();
    tb.join();
    INFO("round " << round << ": a got '" << gotA << "', b got '" << gotB << "'");
    CHECK(gotA == gotB);
    CHECK((gotA == "a" || gotA == "b"));
    EtcdStore& winner = gotA == "a" ? a : b;
    EtcdStore& loser = gotA == "a" ? b : a;
    CHECK(loser.get(key) == gotA);
    // The loser cannot release it; the winner can.
    CHECK_FALSE(loser.release(key));
    CHECK(loser.check({key}));
    CHECK(winner.release(key));
    CHECK_FALSE(loser.check({key}));
    // Free again: the loser takes it now.
    CHECK(loser.hold(key, "again", 10s, "", "") == "again");
  }
}

TEST_CASE(
    "a hold's value can change, a plain key is no one's hold, and closing the store revokes "
    "its lease at once",
    "[etcd_store][hold]") {
  auto client = clientFor(cluster().endpoints());
  const std::string prefix = freshPrefix("close");
  EtcdStore other(client, prefix);
  {
    EtcdStore holder(client, prefix);
    CHECK(holder.hold("alive", "v1", 30s, "", "") == "v1");
    CHECK(holder.hold("alive", "v2", 30s, "", "") == "v2");
    CHECK(other.get("alive") == "v2");
    other.set("plain", "p");
    CHECK(holder.hold("plain", "mine", 30s, "", "") == "p");
    CHECK_FALSE(holder.release("plain"));
    CHECK(holder.hold("unleased", "u", 0ms, "", "") == "u");
    CHECK(other.hold("unleased", "w", 0ms, "", "") == "u");
  }
  const auto closed = Clock::now();
  CHECK_FALSE(other.check({"alive"}));  // the lease was revoked: no wait for its TTL
  CHECK_FALSE(other.check({"unleased"}));
  CHECK(other.check({"plain"}));
  CHECK(msSince(closed) < 1000);
}

TEST_CASE("a renewal is one HTTP request", "[etcd_store][hold]") {
  CountingProxy proxy(cluster().clientPort(0));
  EtcdStore store(clientFor(proxy.endpoint()), freshPrefix("renewal"));
  REQUIRE(store.hold("alive", "n", 5s, "", "") == "n");
  const std::size_t before = proxy.requests().size();
  REQUIRE(store.hold("alive", "n", 5s, "", "") == "n");
  REQUIRE(store.hold("alive", "n", 5s, "", "") == "n");
  const std::vector<std::string> all = proxy.requests();
  const std::vector<std::string> renewals(all.begin() + static_cast<std::ptrdiff_t>(before),
                                          all.end());
  std::string seen;
  for (const std::string& line : all) seen += line + "; ";
  INFO("requests through the forwarder: " << seen);
  CHECK(renewals ==
        std::vector<std::string>{"POST /v3/lease/keepalive", "POST /v3/lease/keepalive"});
}

// The store of the slicing waits, its requests to etcd counted through a forwarder, and a writer
// beside it on the same prefix.
struct SliceStores {
  explicit SliceStores(const std::string& name)
      : prefix(freshPrefix(name)),
        client(clientFor(proxy.endpoint())),
        store(client, prefix),
        writer(clientFor(cluster().endpoints()), prefix) {}
  std::ptrdiff_t count(const std::string& line) {
    const std::vector<std::string> all = proxy.requests();
    return std::count(all.begin(), all.end(), line);
  }
  std::ptrdiff_t watches() { return count("POST /v3/watch"); }
  std::ptrdiff_t reads() { return count("POST /v3/kv/txn"); }

  CountingProxy proxy{cluster().clientPort(0)};
  std::string prefix;
  std::shared_ptr<etcd::EtcdClient> client;  // the store's, through the proxy
  EtcdStore store;
  EtcdStore writer;
};

TEST_CASE("waits in short slices keep one watch and one read, and still see every change after it",
          "[etcd_store][watch]") {
  SliceStores stores("slices");
  EtcdStore& store = stores.store;
  EtcdStore& writer = stores.writer;
  // Membership's stop key: 8 slices of 100 ms with nothing set, then the key set between two.
  // Each slice after the first goes on from what the one before saw (the stream has no gap
  // since), so only the first reads: on one etcd shared by a thousand agents, four reads a
  // second each were its load.
  for (int slice = 0; slice < 8; ++slice)
    CHECK_THROWS_AS(store.wait({"stop"}, 100ms), StoreTimeoutError);
  CHECK(stores.watches() == 1);
  CHECK(stores.reads() == 1);
  writer.set("stop", "done");
  CHECK_NOTHROW(store.wait({"stop"}, 2s));
  CHECK(store.get("stop") == "done");

  // The LapseReporter's alive keys: slices with both there, then one deleted between two slices
  // (seen by the next slice, from the stream), then one deleted during a slice.
  writer.set("alive/1", "a");
  writer.set("alive/2", "b");
  const auto before = stores.watches();
  const auto readsBefore = stores.reads();
  for (int slice = 0; slice < 5; ++slice)
    CHECK(store.waitForAnyMissing({"alive/1", "alive/2"}, 100ms).empty());
  CHECK(stores.watches() == before + 1);
  CHECK(stores.reads() == readsBefore + 1);
  writer.deleteKey("alive/2");
  CHECK(store.waitForAnyMissing({"alive/1", "alive/2"}, 100ms) ==
        std::vector<std::string>{"alive/2"});
  writer.set("alive/2", "b");
  std::thread deleting([&] {
    std::this_thread::sleep_for(300ms);
    writer.deleteKey("alive/1");
  });
  CHECK(store.waitForAnyMissing({"alive/1", "alive/2"}, 5s) == std::vector<std::string>{"alive/1"});
  deleting.join();
  INFO("watches created: " << stores.watches() - before);
  CHECK(stores.watches() - before <= 2);  // the second range (two keys) and nothing more
}

TEST_CASE(
    "a slice whose read outlasts it leaves its view: the next makes its watch from there, "
    "no slice after reads again, and a change after the read is still seen",
    "[etcd_store][watch]") {
  SliceStores stores("slow-slices");
  EtcdStore& store = stores.store;
  EtcdStore& writer = stores.writer;
  const std::string& prefix = stores.prefix;
  writer.set("alive/1", "a");
  writer.set("alive/2", "b");
  const auto readsBefore = stores.reads();
  const auto watchesBefore = stores.watches();
  // Slices with no time at all: each one's read outlasts it, as a 250 ms slice's read does on an
  // etcd loaded by a thousand agents. Each used to read and leave nothing, so the next read too.
  CHECK(store.waitForAnyMissing({"alive/1", "alive/2"}, 0ms).empty());  // reads
  writer.deleteKey("alive/2");  // after that read: only a stream from its revision has it
  // The next makes its watch from the view's revision (past its deadline); none after reads.
  for (int slice = 0; slice < 5; ++slice) store.waitForAnyMissing({"alive/1", "alive/2"}, 0ms);
  INFO("reads: " << stores.reads() - readsBefore
                 << ", watches: " << stores.watches() - watchesBefore);
  CHECK(stores.reads() == readsBefore + 1);
  CHECK(stores.watches() == watchesBefore + 1);
  // A slice with time reads the stream: the delete is there.
  CHECK(store.waitForAnyMissing({"alive/1", "alive/2"}, 5s) == std::vector<std::string>{"alive/2"});
  CHECK(stores.reads() == readsBefore + 1);

  // A view whose revision etcd compacted away meanwhile is read again, not an error.
  CHECK(store.waitForAnyMissing({"alive/1"}, 0ms).empty());  // reads; its view stays
  writer.deleteKey("alive/1");
  writer.set("later", "x");  // the compaction below takes the delete's revision too
  auto client = clientFor(cluster().endpoints());
  client->compact(client->range(etcd::RangeRequest{etcd::KeyRange::single(prefix + "alive/1")})
                      .header.revision);
  std::vector<std::string> missing;
  CHECK_NOTHROW(missing = store.waitForAnyMissing({"alive/1"}, 0ms));
  if (missing.empty()) CHECK_NOTHROW(missing = store.waitForAnyMissing({"alive/1"}, 5s));
  CHECK(missing == std::vector<std::string>{"alive/1"});
}

TEST_CASE(
    "a kept watch lasts while its member answers the agent's keep-alives; once the member is "
    "silent past the check interval (5 s), the next slice reads again",
    "[etcd_store][watch]") {
  // An agent's waiter and its holder share one client (Membership's watch and heartbeat
  // connections): the holder's renewals are answers from the member the watch streams from.
  SliceStores stores("heard");
  EtcdStore& waiter = stores.store;
  EtcdStore holder(stores.client, stores.prefix);
  const auto count = [&](const std::string& line) { return stores.count(line); };
  REQUIRE(holder.hold("alive/me", "n", 5s, "", "") == "n");
  std::atomic<bool> renewing{true};
  std::mutex failedMutex;
  std::string failed;  // a renewal that threw, said after the join (an exception must not escape
                       // the thread)
  std::thread renewals([&] {
    for (int i = 0; i < 30 && renewing;
         ++i) {  // bounded: 30 s at most; the case stops it after 12.5 s
      try {
        holder.hold("alive/me", "n", 5s, "", "");
      } catch (const std::exception& error) {
        std::lock_guard lock(failedMutex);
        failed = error.what();
        return;
      }
      std::this_thread::sleep_for(1s);
    }
  });
  struct StopRenewals {  // joined on every way out of the case, a failed REQUIRE's too
    std::atomic<bool>& renewing;
    std::thread& thread;
    ~StopRenewals() {
      renewing = false;
      if (thread.joinable()) thread.join();
    }
  } stopRenewals{renewing, renewals};
  const auto slicesFor = [&](milliseconds span) {
    const auto until = Clock::now() + span;
    while (Clock::now() < until) CHECK_THROWS_AS(waiter.wait({"stop"}, 250ms), StoreTimeoutError);
  };
  const auto reads = count("POST /v3/kv/txn");
  // Slices for longer than the check interval: one read and one watch, no status request.
  slicesFor(6500ms);
  // A wait long enough for the watch to check its member itself does not ask either.
  CHECK_THROWS_AS(waiter.wait({"stop"}, 6s), StoreTimeoutError);
  INFO("requests: watches " << count("POST /v3/watch") << ", reads "
                            << count("POST /v3/kv/txn") - reads << ", status checks "
                            << count("POST /v3/maintenance/status"));
  CHECK(count("POST /v3/watch") == 1);
  CHECK(count("POST /v3/kv/txn") - reads == 1);
  CHECK(count("POST /v3/maintenance/status") == 0);

  // No more renewals: 5 s after the last answer the next slice asks the member again, as one
  // that went quiet may be cut off (its stream would say nothing): it reads, and the member's
  // answer vouches for the kept stream again. A change is still seen.
  renewing = false;
  renewals.join();
  {
    std::lock_guard lock(failedMutex);
    INFO("a renewal failed: " << failed);
    REQUIRE(failed.empty());
  }
  slicesFor(6s);
  CHECK(count("POST /v3/kv/txn") - reads == 2);
  CHECK(count("POST /v3/watch") == 1);
  CHECK(count("POST /v3/maintenance/status") == 0);
  stores.writer.set("stop", "done");
  CHECK_NOTHROW(waiter.wait({"stop"}, 5s));
}

TEST_CASE("multiGet reads many keys in a few transactions and waits for the missing ones",
          "[etcd_store][multiget]") {
  SliceStores stores("multiget");
  EtcdStore& store = stores.store;
  EtcdStore& writer = stores.writer;
  // A closer reads every joiner's slot: 300 keys are three transactions of up to 128 ranges,
  // not a get of each (300 round trips in a row, minutes for a round of thousands on a busy etcd).
  std::vector<std::string> keys, values;
  for (int i = 0; i < 300; ++i) {
    keys.push_back(fmt::format("slot/{}", i));
    values.push_back(std::to_string(1000 + i));
  }
  writer.multiSet(keys, values);
  const auto readsBefore = stores.reads();
  CHECK(store.multiGet(keys) == values);
  CHECK(stores.reads() - readsBefore == 3);
  CHECK(stores.watches() == 0);
  // Asked in another order, with a key twice: each answer in its place.
  CHECK(store.multiGet({"slot/7", "slot/3", "slot/7"}) ==
        std::vector<std::string>{"1007", "1003", "1007"});
  // A key that is missing is waited for (one watch), and its value is the one put.
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    writer.set("slot/late", "L");
  });
  CHECK(store.multiGet({"slot/1", "slot/late"}) == std::vector<std::string>{"1001", "L"});
  late.join();
  CHECK(stores.watches() == 1);

  // A multiSet's transactions go several at once, except when a key is named twice: then in
  // order, so that its last value wins (here in a later transaction than its first).
  keys.push_back("slot/5");
  values.push_back("last");
  writer.multiSet(keys, values);
  CHECK(store.multiGet({"slot/5", "slot/299"}) == std::vector<std::string>{"last", "1299"});
}

TEST_CASE("a blocking get rides out the loss of etcd's leader and returns the value set later",
          "[etcd_store][outage]") {
  EtcdCluster& etcd = cluster();
  etcd.heal();
  const int leader = etcd.leader(10s);
  REQUIRE(leader >= 0);
  std::vector<int> order = {leader};
  for (int i = 0; i < etcd.size(); ++i) {
    if (i != leader) order.push_back(i);
  }
  const std::string prefix = freshPrefix("leader");
  // The reader's watch starts on the leader (listed first), so that it is the stream lost.
  EtcdStore reader(clientFor(etcd.endpoints(order)), prefix);
  EtcdStore writer(clientFor(etcd.endpoints()), prefix);
  reader.setTimeout(30s);
  std::string got;
  std::string error;
  std::thread waiting([&] {
    try {
      got = reader.get("late");
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(500ms);  // the reader is watching
  const auto killed = Clock::now();
  etcd.kill(leader);
  std::this_thread::sleep_for(300ms);
  writer.set("late", "after the election");  // fails over to the survivors, once they elect
  const auto written = msSince(killed);
  waiting.join();
  std::cout << "figure: leader killed; the set went through " << written
            << " ms after, the blocked get returned " << msSince(killed) << " ms after"
            << std::endl;
  INFO("set " << written << " ms after the kill; the get returned " << msSince(killed)
              << " ms after it");
  CHECK(error.empty());
  CHECK(got == "after the election");
  etcd.restart(leader);
  etcd.heal();
}

TEST_CASE("an unreachable etcd is a StoreConnectionError within the call's deadline",
          "[etcd_store][outage]") {
  const std::uint16_t nobody = ddprun::test::freePort();
  EtcdStore store(clientFor("127.0.0.1:" + std::to_string(nobody), 1000ms), "/nowhere/");
  store.setTimeout(30s);
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"set", [&] { store.set("k", "v"); }},
      {"get", [&] { store.get("k"); }},
      {"add", [&] { store.add("c", 1); }},
      {"hold", [&] { store.hold("alive", "n", 5s, "", ""); }},
      {"waitForAnyMissing", [&] { store.waitForAnyMissing({"alive"}, 30s); }},
  };
  for (const auto& [name, call] : calls) {
    const auto started = Clock::now();
    std::string message;
    try {
      call();
    } catch (const StoreConnectionError& e) {
      message = e.what();
    } catch (const std::exception& e) {
      message = std::string("not a StoreConnectionError: ") + e.what();
    }
    INFO(name << ": " << message);
    CHECK(message.find("etcd store: ") == 0);
    CHECK(msSince(started) < 2500);  // 1 s deadline, with room for a loaded machine
  }
}

TEST_CASE("listing, counting and deleting stay under the store's prefix", "[etcd_store][prefix]") {
  auto client = clientFor(cluster().endpoints());
  const std::string base = freshPrefix("isolation");
  EtcdStore mine(client, base + "a/");
  EtcdStore theirs(client, base + "b/");
  // Keys that share the prefix's bytes without being under it.
  client->put({base + "a", "no slash"});
  client->put({base + "a0/x", "a sibling"});
  client->put({base + "a/", "the prefix itself"});  // key "" of mine
  theirs.set("x", "theirs");
  mine.set("1", "v");
  mine.set("sub/2", "v");
  CHECK(mine.numKeys() == 3);
  CHECK(mine.listPrefix("", 100).keys == std::vector<std::string>{"", "1", "sub/2"});
  CHECK(mine.listKeys() == std::vector<std::string>{"", "1", "sub/2"});
  CHECK(mine.deletePrefix("sub/") == 1);
  CHECK(mine.deletePrefix("") == 2);
  CHECK(mine.numKeys() == 0);
  CHECK(client->get(base + "a").has_value());
  CHECK(client->get(base + "a0/x").has_value());
  CHECK(theirs.get("x") == "theirs");
  CHECK(theirs.numKeys() == 1);
}

TEST_CASE("a ticket is one transaction through the gateway: 64 takers, 64 requests, 1..64",
          "[etcd_store][ticket]") {
  CountingProxy proxy(cluster().clientPort(0));
  auto client = clientFor(proxy.endpoint());
  const std::string prefix = freshPrefix("tickets");
  constexpr int kTakers = 64;
  std::vector<std::int64_t> taken(kTakers);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kTakers; ++i) {
      threads.emplace_back([&, i] {
        EtcdStore store(client, prefix);  // a connection of its own, as each agent has
        taken[static_cast<std::size_t>(i)] = store.takeTicket("round/0/joined");
      });
    }
    for (auto& thread : threads) thread.join();
  }
  // The client's own probes of a new connection (GET /version) aside: the takers' requests.
  std::vector<std::string> seen;
  for (const std::string& line : proxy.requests()) {
    if (line != "GET /version") seen.push_back(line);
  }
  std::string lines;
  for (const std::string& line : seen) lines += line + "; ";
  INFO("requests through the forwarder: " << lines);
  std::sort(taken.begin(), taken.end());
  std::vector<std::int64_t> expected(kTakers);
  for (int i = 0; i < kTakers; ++i) expected[static_cast<std::size_t>(i)] = i + 1;
  CHECK(taken == expected);
  // One write each, none retried (a guarded add makes every loser of a race write again).
  CHECK(seen == std::vector<std::string>(kTakers, "POST /v3/kv/txn"));
  // What the gateway keeps: the key's version counts the puts (its value is empty, no decimal
  // count), and each take left its marker beside it.
  const auto kv = client->get(prefix + "round/0/joined");
  REQUIRE(kv.has_value());
  CHECK(kv->version == kTakers);
  CHECK(kv->value.empty());
  etcd::RangeRequest markers{etcd::KeyRange::prefix(prefix + "round/0/joined/ticket/")};
  markers.countOnly = true;
  CHECK(client->range(markers).count == kTakers);
  EtcdStore reader(client, prefix);
  CHECK(reader.ticketCount("round/0/joined") == kTakers);
  CHECK(reader.ticketCount("round/1/joined") == 0);
  CHECK_FALSE(client->get(prefix + "round/1/joined").has_value());  // a count writes nothing
}

TEST_CASE("a ticket whose answer was lost after it applied is kept, not taken twice",
          "[etcd_store][ticket]") {
  // The first member is reached through a forwarder that forwards the ticket's put and cuts the
  // connection before its answer: the client repeats the call on the second member, whose guard
  // finds this call's marker, and the call reads its number instead of taking another.
  CountingProxy proxy(cluster().clientPort(0));
  auto client =
      clientFor(proxy.endpoint() + ",127.0.0.1:" + std::to_string(cluster().clientPort(1)));
  EtcdStore store(client, freshPrefix("ticket-lost-answer"));
  CHECK(store.takeTicket("t") == 1);
  CHECK(store.takeTicket("t") == 2);
  proxy.fail(CountingProxy::Fault::kCutAnswer, "POST /v3/kv/txn", 1);
  CHECK(store.takeTicket("t") == 3);
  CHECK(proxy.faultsLeft() == 0);
  CHECK(store.ticketCount("t") == 3);  // no number taken for nobody
  CHECK(store.takeTicket("t") == 4);
}

TEST_CASE("a ticket call that ends with its outcome unknown is a StoreConnectionError",
          "[etcd_store][ticket]") {
  // One member, behind a forwarder that fails every ticket put for the call's whole deadline.
  CountingProxy proxy(cluster().clientPort(0));
  EtcdStore store(clientFor(proxy.endpoint(), 1500ms), freshPrefix("ticket-unknown"));
  CHECK(store.takeTicket("t") == 1);
  SECTION("applied, every answer lost: StoreConnectionError, and one number taken, not one a try") {
    proxy.fail(CountingProxy::Fault::kCutAnswer, "POST /v3/kv/txn", 1000);
    CHECK_THROWS_AS(store.takeTicket("t"), StoreConnectionError);
    proxy.fail(CountingProxy::Fault::kNone, "", 0);
    CHECK(store.ticketCount("t") == 2);
    CHECK(store.takeTicket("t") == 3);
  }
  SECTION("applied, the first answer lost: the client's next try finds the marker, one number") {
    proxy.fail(CountingProxy::Fault::kCutAnswer, "POST /v3/kv/txn", 1);
    CHECK(store.takeTicket("t") == 2);
    CHECK(proxy.faultsLeft() == 0);
    CHECK(store.ticketCount("t") == 2);
    CHECK(store.takeTicket("t") == 3);
  }
  SECTION("never applied: StoreConnectionError, and nothing was taken") {
    proxy.fail(CountingProxy::Fault::kDropRequest, "POST /v3/kv/txn", 1000);
    CHECK_THROWS_AS(store.takeTicket("t"), StoreConnectionError);
    proxy.fail(CountingProxy::Fault::kNone, "", 0);
    CHECK(store.ticketCount("t") == 1);
    CHECK(store.takeTicket("t") == 2);
  }
}

TEST_CASE("a key prefix must end with '/'", "[etcd_store]") {
  auto client = clientFor("127.0.0.1:2379");
  CHECK_THROWS_AS(EtcdStore(client, ""), std::invalid_argument);
  CHECK_THROWS_AS(EtcdStore(client, "/job"), std::invalid_argument);
  CHECK_NOTHROW(EtcdStore(client, "/job/"));
}
