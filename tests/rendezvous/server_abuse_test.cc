// Nobody hurts anybody: half-sent, oversized, malformed and unread traffic costs only the
// connection that sends it, while other clients keep being served promptly.
#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "log_capture.h"
#include "raw_client.h"
#include "test_server.h"
#include "waits.h"

using namespace ddprun::rendezvous;
using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMiB = 1024 * 1024;

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

// What the bystanders saw while a misbehaving client did its worst.
struct AbuseRun {
  Latencies bystanders;  // per-call latencies of 2 clients x 200 rounds
  int rounds = 0;        // how many times the abuse ran
  int failures = 0;      // rounds where the server did not react as it should, or that threw
};

// Runs `abuse` (returns false when the server did not react as it should) over and over on its
// own thread while two bystander clients run their workload. `abuse` runs off the test's thread,
// so it must not use Catch assertions.
AbuseRun workloadDuring(TestServer& server, const std::function<bool()>& abuse) {
  AbuseRun run;
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  std::thread abuser([&] {
    while (!done.load()) {
      started = true;
      try {
        if (!abuse()) ++run.failures;
      } catch (const std::exception&) {
        ++run.failures;
      }
      ++run.rounds;
    }
  });
  while (!started.load()) std::this_thread::yield();
  run.bystanders = runWorkload(server, 2, 200);
  done = true;
  abuser.join();
  return run;
}

// The bystanders' verdict: every call completed, with the tail of a server that never blocks.
// The bounds are generous for a loaded 2-core machine under a sanitizer (p99 is a few ms when
// idle, about 15 ms with two busy loops beside it); a server that blocks on a stalled or
// oversized request, or builds a huge reply in one go, takes seconds.
void checkBystanders(Latencies& latencies, std::size_t samples) {
  INFO(fmt::format("bystander per-call latency p50/p99/max: {:.3f}/{:.3f}/{:.3f} ms",
                   latencies.percentile(0.5), latencies.percentile(0.99),
                   latencies.percentile(1.0)));
  CHECK(latencies.ms.size() == samples);
  CHECK(latencies.percentile(0.99) < 100.0);
  CHECK(latencies.percentile(1.0) < 2000.0);
}

// What the server counts, for a wait that gives up.
std::string describeStats(TestServer& server) {
  const auto stats = server.server().stats();
  return fmt::format("server stats: {} connections, {} refused, {} protocol errors",
                     stats.connections, stats.refused, stats.protocolErrors);
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
  checkBystanders(loaded, 800);
  // And the tail is the same as without them (2x, plus slack for a busy 2-core machine, where
  // another test can take the cores during one of the two measurements).
  CHECK(loaded.percentile(0.99) < 2 * baseline.percentile(0.99) + 20.0);
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
  AbuseRun run = workloadDuring(server, [&] {
    bool allClosed = true;
    for (const std::string& frame : frames) {
      RawClient attacker("127.0.0.1", server.port());
      attacker.send(frame);
      allClosed = attacker.closedWithin(2s) && allClosed;
    }
    return allClosed;
  });
  checkBystanders(run.bystanders, 400);
  CHECK(run.failures == 0);
  const std::size_t rssAfter = residentBytes();
  INFO("RSS grew by " << (rssAfter - std::min(rssAfter, rssBefore)) / 1024 << " KiB after "
                      << run.rounds << " rounds");
  CHECK(rssAfter < rssBefore + 16 * kMiB);
  CHECK(bystander.get("k") == "v");
  CHECK(server.server().stats().protocolErrors == 6u * static_cast<unsigned>(run.rounds));
}

TEST_CASE("a small MULTI_GET that would need a huge reply is refused before it is built",
          "[abuse]") {
  LogCapture log;
  TestServer server;  // the defaults: 8 MiB values, 64 MiB of pending replies
  TcpStore writer(server.clientOptions());
  writer.set("big", std::string(8 * kMiB, 'v'));
  REQUIRE(writer.check({"big"}));
  // A few hundred bytes that name one 8 MiB value 32 times: 256 MiB of reply. At the 128 Ki key
  // limit the same trick would ask for 1 TiB.
  std::string request = hex("0a") + u64(32);
  for (int i = 0; i < 32; ++i) request += blob("/big");
  const std::size_t rssBefore = residentBytes();
  std::atomic<std::size_t> rssPeak{rssBefore};
  AbuseRun run = workloadDuring(server, [&] {
    RawClient attacker("127.0.0.1", server.port());
    attacker.handshake2x();
    attacker.send(request);  // and never reads
    const bool closed = attacker.closedWithin(2s);
    // Sampled while the connection (if it is still open) holds whatever was built for it.
    rssPeak = std::max(rssPeak.load(), residentBytes());
    return closed;
  });
  checkBystanders(run.bystanders, 400);
  CHECK(run.failures == 0);
  INFO("RSS grew by up to " << (rssPeak.load() - rssBefore) / 1024 << " KiB in " << run.rounds
                            << " rounds");
  CHECK(rssPeak.load() < rssBefore + 32 * kMiB);
  CHECK_THAT(log.text(), Catch::Contains("closing connection from 127.0.0.1:"));
  CHECK_THAT(log.text(), Catch::Contains(fmt::format(
                             "MULTI_GET of 32 keys would need a {}-byte reply, over the {}-byte "
                             "pending-reply limit",
                             32 * (8 + 8 * kMiB), 64 * kMiB)));
  // The limit is on one reply, not on large values: a reply within it is served.
  const auto values = writer.multiGet({"big", "big"});
  CHECK(values.size() == 2);
  CHECK(values[1].size() == 8 * kMiB);
}

TEST_CASE("an APPEND past the value limit closes its connection and changes nothing",
          "[abuse]") {
  LogCapture log;
  ServerOptions options;
  options.limits.maxValueBytes = 1024;
  TestServer server(options);
  TcpStore store(server.clientOptions());
  store.append("log", std::string(1000, 'a'));
  CHECK(store.check({"log"}));
  RawClient c("127.0.0.1", server.port());
  c.handshake2x();
  c.send(hex("09") + blob("/log") + blob(std::string(25, 'b')));  // 1025 bytes in all
  CHECK(c.closedWithin(2s));
  CHECK_THAT(log.text(), Catch::Contains("APPEND to key '/log' would make a 1025-byte value, over "
                                         "the 1024-byte limit"));
  CHECK(store.get("log") == std::string(1000, 'a'));
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

  std::function<void(RawClient&)> misbehave;
  std::string logged;  // the reason the warning gives after the peer's address
  SECTION("unknown op") {
    misbehave = [](RawClient& c) { c.sendHex("63"); };
    logged = "unknown op 0x63 on a torch-1.13 connection";
  }
  SECTION("wrong validation magic") {
    misbehave = [](RawClient& c) { c.sendHex("00 deadbeef 0d010203"); };
    logged = "first frame is neither a torch 2.x VALIDATE";
  }
  SECTION("a second VALIDATE with the wrong magic on a 2.x connection") {
    misbehave = [](RawClient& c) {
      c.handshake2x();
      c.sendHex("00 01020304");
    };
    logged = "VALIDATE with wrong magic 0x04030201";
  }
  SECTION("an HTTP request, as from a port scanner") {
    misbehave = [](RawClient& c) { c.send("GET / HTTP/1.1\r\nHost: store\r\n\r\n"); };
    logged = "unknown op 0x47 on a torch-1.13 connection";
  }
  RawClient bad("127.0.0.1", server.port());
  misbehave(bad);
  CHECK(bad.closedWithin(2s));
  CHECK_THAT(log.text(), Catch::Contains(fmt::format("closing connection from 127.0.0.1:{}: {}",
                                                     bad.localPort(), logged)));
  CHECK(bystander.get("k") == "v");
  CHECK(bystander.numKeys() == 1);
  // The same frame sent over and over does not slow anyone else down.
  AbuseRun run = workloadDuring(server, [&] {
    RawClient again("127.0.0.1", server.port());
    misbehave(again);
    return again.closedWithin(2s);
  });
  checkBystanders(run.bystanders, 400);
  CHECK(run.failures == 0);
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
  CHECK(eventually([&] { return server.server().stats().connections == 2; }, 10s,
                   [&] { return describeStats(server); }));
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
  // Others are still served, promptly, while the greedy client sits on its replies.
  CHECK(writer.add("other", 1) == 1);
  Latencies during = runWorkload(server, 2, 200);
  checkBystanders(during, 400);
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
  CHECK(eventually([&] { return server.server().stats().connections == 1; }, 10s,
                   [&] { return describeStats(server); }));
  CHECK_THAT(log.text(), Catch::Contains("has not read its replies for 300 ms"));
}

TEST_CASE("a slow but steady reader of a large reply is not cut off, one that stops reading is",
          "[abuse]") {
  LogCapture log;
  ServerOptions options;
  options.writeStallTimeout = 1s;
  TestServer server(options);
  TcpStore writer(server.clientOptions());
  writer.set("big", std::string(8 * kMiB, 'v'));
  REQUIRE(writer.check({"big"}));
  std::string request = hex("0a") + u64(6);
  for (int i = 0; i < 6; ++i) request += blob("/big");
  const std::size_t total = 6 * (8 + 8 * kMiB);
  {
    // 48 MiB read in 128 KiB sips: the reply takes about three times the stall timeout to leave,
    // but some of it moves every few milliseconds.
    RawClient slow("127.0.0.1", server.port());
    slow.handshake2x();
    slow.send(request);
    const auto started = Clock::now();
    std::size_t received = 0;
    while (received < total) {
      const auto chunk = slow.receive(std::min<std::size_t>(128 * 1024, total - received), 5s);
      REQUIRE(chunk.has_value());
      received += chunk->size();
      std::this_thread::sleep_for(8ms);
    }
    INFO("the reply took " << std::chrono::duration<double>(Clock::now() - started).count()
                           << " s");
    CHECK(Clock::now() - started > 1500ms);  // longer than the timeout, or the test proves nothing
    CHECK(server.server().stats().protocolErrors == 0);
  }
  // A reader that stops halfway is closed once nothing has moved for the timeout.
  RawClient stopping("127.0.0.1", server.port());
  stopping.handshake2x();
  stopping.send(request);
  REQUIRE(stopping.receive(16 * kMiB, 10s).has_value());
  const auto stopped = Clock::now();
  CHECK(eventually([&] { return server.server().stats().protocolErrors == 1; }, 10s,
                   [&] { return describeStats(server); }));
  CHECK(Clock::now() - stopped > 700ms);
  CHECK_THAT(log.text(), Catch::Contains("has not read its replies for 1000 ms"));
}

TEST_CASE("a WATCH_KEY watcher that does not read its events is closed at the pending limit",
          "[abuse]") {
  LogCapture log;
  ServerOptions options;
  options.maxPendingReplyBytes = 1 * kMiB;
  TestServer server(options);
  RawClient watcher("127.0.0.1", server.port());
  watcher.send(hex("07") + blob("/w"));
  REQUIRE(watcher.receive(1) == hex("03"));
  // Other clients' writes produce the events, so pausing the watcher's reads cannot bound them.
  TcpStore writer(server.clientOptions(WireDialect::kTorch113));
  const std::string value(256 * 1024, 'v');
  for (int i = 0; i < 400 && server.server().stats().protocolErrors == 0; ++i) {
    writer.set("w", value + std::to_string(i));  // 512 KiB of event each: old and new value
  }
  CHECK(eventually([&] { return server.server().stats().protocolErrors == 1; }, 10s,
                   [&] { return describeStats(server); }));
  CHECK_THAT(log.text(), Catch::Contains("bytes of unread WATCH_KEY events, over the 1048576-byte "
                                         "pending-reply limit"));
  CHECK(writer.add("still-served", 1) == 1);
}
