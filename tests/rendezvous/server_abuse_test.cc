// Nobody hurts anybody: half-sent, oversized, malformed and unread traffic costs only the
// connection that sends it, while other clients keep being served promptly.
#include <algorithm>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "log_capture.h"
#include "raw_client.h"
#include "test_server.h"

using namespace ddprun::rendezvous;
using ddprun::test::blob;
using ddprun::test::hex;
using ddprun::test::u64;
using ddprun::test::LogCapture;
using ddprun::test::RawClient;
using ddprun::test::residentBytes;
using ddprun::test::TestServer;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {


struct Latencies {
  std::vector<double> ms;
  double percentile(double p) {
    std::sort(ms.begin(), ms.end());
    return ms.empty() ? 0 : ms[std::min(ms.size() - 1, static_cast<std::size_t>(p * ms.size()))];
  }
};

// `clients` TcpStore clients each do `rounds` of set/get/add; returns every call's latency.
Latencies runWorkload(TestServer& server, int clients, int rounds) {
  std::vector<Latencies> perThread(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      TcpStore store(server.clientOptions());
      for (int i = 0; i < rounds; ++i) {
        const auto start = Clock::now();
        store.set(fmt::format("w{}", c), "value");
        store.get(fmt::format("w{}", c));
        store.add("w-counter", 1);
        perThread[c].ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start).count() / 3);
      }
    });
  }
  for (auto& t : threads) t.join();
  Latencies all;
  for (auto& l : perThread) all.ms.insert(all.ms.end(), l.ms.begin(), l.ms.end());
  return all;
}

// Polls `condition` for up to `timeout`.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

}  // namespace

TEST_CASE("clients that send half a request and stall do not delay anyone else", "[abuse]") {
  TestServer server;
  Latencies baseline = runWorkload(server, 4, 200);

  // 100 connections each send the first bytes of a SET (op and part of the key length) and stop.
  // torch's servers read a request with blocking calls: one such client stalls all of them.
  std::vector<std::unique_ptr<RawClient>> stalled;
  for (int i = 0; i < 100; ++i) {
    stalled.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
    stalled.back()->sendHex(i % 2 == 0 ? "01 03000000" : "00cef7853c 01 0300000000000000 2f");
  }
  Latencies loaded = runWorkload(server, 4, 200);
  INFO(fmt::format("per-call latency p50/p99/max: baseline {:.3f}/{:.3f}/{:.3f} ms, with 100 "
                   "stalled half-requests {:.3f}/{:.3f}/{:.3f} ms",
                   baseline.percentile(0.5), baseline.percentile(0.99), baseline.percentile(1.0),
                   loaded.percentile(0.5), loaded.percentile(0.99), loaded.percentile(1.0)));
  // Every call finished, none anywhere near the stall (which lasts until the end of the test).
  CHECK(loaded.ms.size() == 800);
  CHECK(loaded.percentile(1.0) < 1000.0);
  // And the tail is the same as without them (2x, plus slack for a busy 2-core machine).
  CHECK(loaded.percentile(0.99) < 2 * baseline.percentile(0.99) + 5.0);
  // The stalled connections were not simply dropped: they are still open, waiting.
  CHECK(server.server().stats().connections >= 100);
}

TEST_CASE("oversized lengths close the connection before anything is allocated", "[abuse]") {
  TestServer server;
  TcpStore bystander(server.clientOptions());
  bystander.set("k", "v");
  const std::size_t rssBefore = residentBytes();
  const std::vector<std::string> frames = {
      hex("00cef7853c 01") + u64(8 * 1024 + 1),                    // key: limit + 1
      hex("00cef7853c 01") + blob("k") + u64(8 * 1024 * 1024 + 1),  // value: limit + 1
      hex("00cef7853c 09") + blob("k") + u64(1ull << 40),           // 1 TiB append
      hex("00cef7853c 01") + u64(~0ull),                            // 2^64 - 1
      hex("03") + u64(1ull << 62),                                  // 1.13 ADD, 2^62 key
      hex("00cef7853c 06") + u64(1ull << 32),                       // 4 Gi keys in one WAIT
  };
  for (int round = 0; round < 20; ++round) {
    for (const std::string& frame : frames) {
      RawClient attacker("127.0.0.1", server.port());
      attacker.send(frame);
      REQUIRE(attacker.closedWithin(2s));
    }
  }
  const std::size_t rssAfter = residentBytes();
  INFO("RSS grew by " << (rssAfter - std::min(rssAfter, rssBefore)) / 1024 << " KiB");
  CHECK(rssAfter < rssBefore + 16 * 1024 * 1024);
  CHECK(bystander.get("k") == "v");
  CHECK(server.server().stats().protocolErrors == 120);
}

TEST_CASE("an announced value costs only the bytes that actually arrive", "[abuse]") {
  TestServer server;
  const std::size_t rssBefore = residentBytes();
  // 200 connections each announce an 8 MiB value (allowed) and send 10 bytes of it. A server that
  // reserved the announced size would hold 1.6 GB now.
  std::vector<std::unique_ptr<RawClient>> teasers;
  for (int i = 0; i < 200; ++i) {
    teasers.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
    teasers.back()->send(hex("00cef7853c 01") + blob("k") + u64(8 * 1024 * 1024) + "0123456789");
  }
  TcpStore probe(server.clientOptions());
  probe.set("alive", "yes");  // every teaser has been read by now: one event-loop thread, in order
  CHECK(probe.get("alive") == "yes");
  const std::size_t rssAfter = residentBytes();
  INFO("RSS grew by " << (rssAfter - std::min(rssAfter, rssBefore)) / 1024 << " KiB");
  CHECK(rssAfter < rssBefore + 32 * 1024 * 1024);
}

TEST_CASE("a malformed frame closes only its connection, with a log line naming the peer",
          "[abuse]") {
  LogCapture log;
  TestServer server;
  TcpStore bystander(server.clientOptions());
  bystander.set("k", "v");

  SECTION("unknown op") {
    RawClient bad("127.0.0.1", server.port());
    bad.sendHex("63");
    CHECK(bad.closedWithin(2s));
    CHECK_THAT(log.text(), Catch::Contains(fmt::format(
                               "closing connection from 127.0.0.1:{}: unknown op 0x63", bad.localPort())));
  }
  SECTION("wrong validation magic") {
    RawClient bad("127.0.0.1", server.port());
    bad.sendHex("00 deadbeef 0d010203");
    CHECK(bad.closedWithin(2s));
    CHECK_THAT(log.text(), Catch::Contains(fmt::format("127.0.0.1:{}", bad.localPort())));
    CHECK_THAT(log.text(), Catch::Contains("neither a torch 2.x VALIDATE"));
  }
  SECTION("a second VALIDATE with the wrong magic on a 2.x connection") {
    RawClient bad("127.0.0.1", server.port());
    bad.handshake2x();
    bad.sendHex("00 01020304");
    CHECK(bad.closedWithin(2s));
    CHECK_THAT(log.text(), Catch::Contains("VALIDATE with wrong magic 0x04030201"));
  }
  SECTION("an HTTP request, as from a port scanner") {
    RawClient bad("127.0.0.1", server.port());
    bad.send("GET / HTTP/1.1\r\nHost: store\r\n\r\n");
    CHECK(bad.closedWithin(2s));
  }
  CHECK(bystander.get("k") == "v");
  CHECK(bystander.numKeys() == 1);
}

TEST_CASE("a stalled half request is closed after the timeout and an idle connection is not",
          "[abuse]") {
  ServerOptions options;
  options.partialRequestTimeout = 300ms;
  TestServer server(options);
  RawClient idle("127.0.0.1", server.port());
  idle.handshake2x();
  RawClient stalled("127.0.0.1", server.port());
  stalled.sendHex("00cef7853c 01 0300000000000000 2f6b");
  CHECK(stalled.closedWithin(3s));
  // A client that sends nothing at all (torch workers hold their store connection silently for
  // the whole training run) is never closed for being idle.
  CHECK(idle.silentFor(800ms));
  idle.sendHex("0d 05060708");
  CHECK(idle.receive(4) == hex("05060708"));
}

TEST_CASE("connections over the limit are refused, and the limit frees up again", "[abuse]") {
  LogCapture log;
  ServerOptions options;
  options.maxConnections = 3;
  TestServer server(options);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
    clients.back()->handshake2x();
  }
  RawClient extra("127.0.0.1", server.port());
  CHECK(extra.closedWithin(2s));
  CHECK(server.server().stats().refused == 1);
  CHECK_THAT(log.text(), Catch::Contains("refusing connection from 127.0.0.1"));
  clients.pop_back();
  CHECK(eventually([&] { return server.server().stats().connections == 2; }, 2s));
  RawClient again("127.0.0.1", server.port());
  again.handshake2x();
}

TEST_CASE("a client that does not read its replies cannot make the server buffer without bound",
          "[abuse]") {
  ServerOptions options;
  options.maxPendingReplyBytes = 2 * 1024 * 1024;
  TestServer server(options);
  TcpStore writer(server.clientOptions());
  const std::string value(1024 * 1024, 'v');
  writer.set("big", value);
  REQUIRE(writer.check({"big"}));  // SET has no reply: a round trip makes sure it has landed
  const std::size_t rssBefore = residentBytes();

  RawClient greedy("127.0.0.1", server.port());
  greedy.handshake2x();
  std::string requests;
  for (int i = 0; i < 300; ++i) requests += hex("03") + blob("/big");
  greedy.send(requests);  // 300 MiB of replies asked for, none read yet
  std::this_thread::sleep_for(300ms);
  const std::size_t rssAfter = residentBytes();
  INFO("RSS grew by " << (rssAfter - std::min(rssAfter, rssBefore)) / 1024 << " KiB");
  CHECK(rssAfter < rssBefore + 64 * 1024 * 1024);
  // Others are still served while the greedy client sits on its replies.
  CHECK(writer.add("other", 1) == 1);
  // Nothing was lost: every reply arrives, in order, once the client reads.
  for (int i = 0; i < 300; ++i) {
    const auto reply = greedy.receive(8 + value.size(), 10s);
    REQUIRE(reply.has_value());
    REQUIRE(reply->substr(8) == value);
  }
}

TEST_CASE("a client that never reads its replies is disconnected after the write-stall timeout",
          "[abuse]") {
  LogCapture log;
  ServerOptions options;
  options.maxPendingReplyBytes = 2 * 1024 * 1024;
  options.writeStallTimeout = 300ms;
  TestServer server(options);
  TcpStore writer(server.clientOptions());
  writer.set("big", std::string(1024 * 1024, 'v'));
  REQUIRE(writer.check({"big"}));
  RawClient greedy("127.0.0.1", server.port());
  greedy.handshake2x();
  std::string requests;
  for (int i = 0; i < 100; ++i) requests += hex("03") + blob("/big");
  greedy.send(requests);
  CHECK(eventually([&] { return server.server().stats().connections == 1; }, 10s));
  CHECK_THAT(log.text(), Catch::Contains("has not read its replies for 300 ms"));
}
