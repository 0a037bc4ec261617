// The exact bytes the server answers, op by op, in both dialects: the observed bytes of torch's
// servers (../shared/reference/tcpstore-protocol.md) are the expectation.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "raw_client.h"
#include "test_server.h"
#include "waits.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace std::chrono_literals;

namespace {

// Receives exactly `expected.size()` bytes and compares them in hex (readable failures).
void expectReply(RawClient& client, const std::string& expected) {
  const auto got = client.receive(expected.size());
  REQUIRE(got.has_value());
  CHECK(toHex(*got) == toHex(expected));
}

}  // namespace

TEST_CASE("torch 2.x dialect: every op answers torch's bytes", "[wire][torch2]") {
  TestServer server;
  RawClient c("127.0.0.1", server.port());

  // VALIDATE has no reply; PING echoes its nonce.
  c.sendHex("00 cef7853c");
  CHECK(c.silentFor(50ms));
  c.sendHex("0d c6070000");
  expectReply(c, hex("c6070000"));

  // SET has no reply; GET returns the blob.
  c.sendHex("01 0300000000000000 2f6b31 0200000000000000 7631");
  CHECK(c.silentFor(50ms));
  c.sendHex("03 0300000000000000 2f6b31");
  expectReply(c, hex("0200000000000000 7631"));

  // ADD on a missing key starts at 0; the counter is stored as ASCII decimal.
  c.sendHex("04 0400000000000000 2f636e74 0500000000000000");
  expectReply(c, hex("0500000000000000"));
  c.sendHex("04 0400000000000000 2f636e74 fdffffffffffffff");
  expectReply(c, hex("0200000000000000"));
  c.sendHex("03 0400000000000000 2f636e74");
  expectReply(c, hex("0100000000000000 32"));

  // COMPARE_SET: create on missing+empty expected; echo `expected` on missing+non-empty;
  // current value on mismatch; new value on match.
  c.sendHex("02 0300000000000000 2f6373 0000000000000000 0300000000000000 6e6577");
  expectReply(c, hex("0300000000000000 6e6577"));
  c.sendHex("02 0400000000000000 2f637332 0100000000000000 78 0100000000000000 79");
  expectReply(c, hex("0100000000000000 78"));
  c.sendHex("02 0300000000000000 2f6373 0500000000000000 77726f6e67 0100000000000000 7a");
  expectReply(c, hex("0300000000000000 6e6577"));
  c.sendHex("02 0300000000000000 2f6373 0300000000000000 6e6577 0100000000000000 7a");
  expectReply(c, hex("0100000000000000 7a"));
  // ... and the echoed-but-not-created key really does not exist.
  c.sendHex("05 0100000000000000 0400000000000000 2f637332");
  expectReply(c, hex("01"));

  // CHECK: 00 when all exist (also for an empty list), 01 otherwise.
  c.sendHex("05 0200000000000000 0300000000000000 2f6b31 0500000000000000 2f6e6f7065");
  expectReply(c, hex("01"));
  c.sendHex("05 0000000000000000");
  expectReply(c, hex("00"));

  // APPEND creates, then appends; no reply.
  c.sendHex("09 0300000000000000 2f6170 0200000000000000 6162");
  c.sendHex("09 0300000000000000 2f6170 0100000000000000 63");
  c.sendHex("03 0300000000000000 2f6170");
  expectReply(c, hex("0300000000000000 616263"));

  // MULTI_SET then MULTI_GET; a missing key reads as an empty blob (libuv's behaviour).
  c.sendHex(
      "0b 0200000000000000 0300000000000000 2f6d31 0100000000000000 31"
      "   0300000000000000 2f6d32 0200000000000000 3232");
  c.sendHex(
      "0a 0300000000000000 0300000000000000 2f6d31 0300000000000000 2f6d32"
      "   0300000000000000 2f6d33");
  expectReply(c, hex("0100000000000000 31 0200000000000000 3232 0000000000000000"));

  // GETNUMKEYS counts the whole map: /k1 /cnt /cs /ap /m1 /m2.
  c.sendHex("07");
  expectReply(c, hex("0600000000000000"));

  // DELETE_KEY: 1 when it existed, 0 otherwise.
  c.sendHex("08 0300000000000000 2f6b31");
  expectReply(c, hex("0100000000000000"));
  c.sendHex("08 0500000000000000 2f6e6f7065");
  expectReply(c, hex("0000000000000000"));

  // GET of a missing key: an empty blob, and the connection stays.
  c.sendHex("03 0500000000000000 2f6e6f7065");
  expectReply(c, hex("0000000000000000"));

  // LIST_KEYS: count, then every raw key.
  c.sendHex("11");
  const auto count = c.receive(8);
  REQUIRE(count);
  REQUIRE(*count == u64(5));
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    const auto length = c.receive(8);
    REQUIRE(length);
    std::uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>((*length)[b]);
    keys.push_back(*c.receive(n));
  }
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"/ap", "/cnt", "/cs", "/m1", "/m2"});

  // CANCEL_WAIT with nothing pending still answers 01.
  c.sendHex("0c");
  expectReply(c, hex("01"));
}

TEST_CASE("torch 2.x dialect: WAIT parks until the last missing key appears", "[wire][torch2]") {
  TestServer server;
  RawClient waiter("127.0.0.1", server.port());
  RawClient writer("127.0.0.1", server.port());
  waiter.handshake2x();
  writer.handshake2x();

  SECTION("keys that exist answer at once") {
    writer.send(hex("01") + blob("/a") + blob("1"));
    waiter.send(hex("06") + u64(1) + blob("/a"));
    expectReply(waiter, hex("00"));
  }
  SECTION("multi-key WAIT answers once, after the last key") {
    waiter.send(hex("06") + u64(2) + blob("/k1") + blob("/k2"));
    writer.send(hex("01") + blob("/k1") + blob("v"));
    CHECK(waiter.silentFor(100ms));
    writer.send(hex("04") + blob("/k2") + u64(1));  // ADD also creates the key
    expectReply(writer, u64(1));
    expectReply(waiter, hex("00"));
    CHECK(waiter.silentFor(50ms));
  }
  SECTION("APPEND, MULTI_SET and a creating COMPARE_SET wake waiters too") {
    waiter.send(hex("06") + u64(3) + blob("/x") + blob("/y") + blob("/z"));
    writer.send(hex("09") + blob("/x") + blob("1"));
    writer.send(hex("0b") + u64(1) + blob("/y") + blob("2"));
    CHECK(waiter.silentFor(50ms));
    writer.send(hex("02") + blob("/z") + blob("") + blob("3"));
    expectReply(writer, blob("3"));
    expectReply(waiter, hex("00"));
  }
  SECTION("CANCEL_WAIT answers 01 and keeps the connection in sync") {
    waiter.send(hex("06") + u64(1) + blob("/never"));
    CHECK(waiter.silentFor(100ms));
    waiter.sendHex("0c");
    expectReply(waiter, hex("01"));
    writer.send(hex("01") + blob("/never") + blob("late"));
    writer.sendHex("07");
    expectReply(writer, u64(1));  // the SET has been applied
    waiter.sendHex("07");
    expectReply(waiter, u64(1));  // no stale STOP_WAITING in front of the count
  }
  SECTION("requests after a parked WAIT are still answered (CANCEL_WAIT needs that)") {
    waiter.send(hex("06") + u64(1) + blob("/later"));
    waiter.send(hex("0d 01020304"));
    expectReply(waiter, hex("01020304"));
    writer.send(hex("01") + blob("/later") + blob("v"));
    expectReply(waiter, hex("00"));
  }
  SECTION("a waiter that disconnects is forgotten") {
    {
      RawClient gone("127.0.0.1", server.port());
      gone.handshake2x();
      gone.send(hex("06") + u64(1) + blob("/k"));
      CHECK(gone.silentFor(50ms));
    }
    // Once the server has seen it go (the waiter and the writer are left), the key appears.
    REQUIRE(ddprun::test::eventually(
        [&] { return server.server().stats().connections == 2; }, 10s,
        [&] { return std::to_string(server.server().stats().connections) + " connections"; }));
    writer.send(hex("01") + blob("/k") + blob("v"));
    writer.sendHex("07");
    expectReply(writer, u64(1));
  }
}

TEST_CASE("torch 2.x dialect: queues, BARRIER and ADD edge cases", "[wire][torch2]") {
  TestServer server;
  RawClient a("127.0.0.1", server.port());
  RawClient b("127.0.0.1", server.port());
  a.handshake2x();
  b.handshake2x();

  SECTION("queue push/pop/len; a push wakes a WAIT on the queue") {
    b.send(hex("06") + u64(1) + blob("/q"));
    a.send(hex("0e") + blob("/q") + blob("first"));
    expectReply(b, hex("00"));
    a.send(hex("0e") + blob("/q") + blob("second"));
    a.send(hex("10") + blob("/q"));
    expectReply(a, u64(2));
    a.send(hex("0f") + blob("/q"));
    expectReply(a, u64(2) + blob("first"));
    a.send(hex("0f") + blob("/q"));
    expectReply(a, u64(1) + blob("second"));
    a.send(hex("0f") + blob("/q"));
    expectReply(a, u64(0));  // empty: length 0 and no blob
    a.sendHex("07");
    expectReply(a, u64(0));  // queues are not keys
  }
  SECTION("a queue push wakes only the first waiter") {
    RawClient c("127.0.0.1", server.port());
    c.handshake2x();
    b.send(hex("06") + u64(1) + blob("/q"));
    CHECK(b.silentFor(50ms));
    c.send(hex("06") + u64(1) + blob("/q"));
    CHECK(c.silentFor(50ms));
    a.send(hex("0e") + blob("/q") + blob("x"));
    expectReply(b, hex("00"));
    CHECK(c.silentFor(100ms));
  }
  SECTION("BARRIER releases everyone when the count reaches the world size") {
    a.send(hex("12") + blob("/bar") + u64(2));
    CHECK(a.silentFor(100ms));
    b.send(hex("12") + blob("/bar") + u64(2));
    expectReply(b, hex("00"));
    expectReply(a, hex("00"));
    a.send(hex("03") + blob("/bar"));
    expectReply(a, blob("2"));
  }
  SECTION("a parked BARRIER is cancelled by CANCEL_WAIT") {
    a.send(hex("12") + blob("/bar2") + u64(3));
    CHECK(a.silentFor(50ms));
    a.sendHex("0c");
    expectReply(a, hex("01"));
  }
  SECTION("ADD parses like stoll and wraps on overflow") {
    a.send(hex("01") + blob("/n") + blob(" 12abc"));
    a.send(hex("04") + blob("/n") + u64(1));
    expectReply(a, u64(13));
    a.send(hex("01") + blob("/max") + blob("9223372036854775807"));
    a.send(hex("04") + blob("/max") + u64(1));
    expectReply(a, hex("0000000000000080"));
  }
  SECTION("ADD on a non-integer closes only that connection") {
    a.send(hex("01") + blob("/text") + blob("abc"));
    a.send(hex("04") + blob("/text") + u64(1));
    CHECK(a.closedWithin(2s));
    b.sendHex("07");
    expectReply(b, u64(1));
  }
}

TEST_CASE("ddprun extension ops HOLD and RELEASE on a 2.x connection", "[wire][torch2]") {
  TestServer server;
  RawClient c("127.0.0.1", server.port());
  c.handshake2x();
  c.send(hex("d0") + blob("/alive/1") + blob("n1") + hex("00000000") + blob("/stop") +
         blob("lost"));
  expectReply(c, blob("n1"));
  c.send(hex("d1") + blob("/alive/1"));
  expectReply(c, u64(1));
  c.send(hex("d1") + blob("/alive/1"));
  expectReply(c, u64(0));
  // A 1.13 connection does not know them.
  RawClient old("127.0.0.1", server.port());
  old.send(hex("d0"));
  CHECK(old.closedWithin(2s));
}

TEST_CASE("torch 1.13 dialect: the observed 1.13 bytes", "[wire][torch113]") {
  TestServer server;
  RawClient c("127.0.0.1", server.port());

  // Worker registration: ADD init/ += 1 (no slash).
  c.sendHex("03 0500000000000000 696e69742f 0100000000000000");
  expectReply(c, hex("0100000000000000"));
  c.sendHex("00 0300000000000000 2f6b31 0200000000000000 7631");
  CHECK(c.silentFor(50ms));
  // get = WAIT then GET.
  c.sendHex("05 0100000000000000 0300000000000000 2f6b31");
  expectReply(c, hex("00"));
  c.sendHex("02 0300000000000000 2f6b31");
  expectReply(c, hex("0200000000000000 7631"));
  c.sendHex("04 0000000000000000");
  expectReply(c, hex("00"));
  c.sendHex("05 0000000000000000");
  expectReply(c, hex("00"));
  c.sendHex("06");
  expectReply(c, hex("0200000000000000"));
  c.sendHex("08 0300000000000000 2f6b31");
  expectReply(c, hex("0100000000000000"));
  // GET of a missing key drops the connection, as torch 1.13's server does.
  c.sendHex("02 0500000000000000 2f6e6f7065");
  CHECK(c.closedWithin(2s));
}

TEST_CASE("torch 1.13 dialect: compare_set, CHECK and DELETE_KEY on missing keys",
          "[wire][torch113]") {
  TestServer server;
  RawClient c("127.0.0.1", server.port());
  // compare_set('cs', '', 'new') on a missing key creates it.
  c.sendHex("01 0300000000000000 2f6373 0000000000000000 0300000000000000 6e6577");
  expectReply(c, hex("0300000000000000 6e6577"));
  // compare_set('cs2', 'x', 'y') on a missing key echoes 'x' and creates nothing.
  c.sendHex("01 0400000000000000 2f637332 0100000000000000 78 0100000000000000 79");
  expectReply(c, hex("0100000000000000 78"));
  c.sendHex("04 0100000000000000 0400000000000000 2f637332");
  expectReply(c, hex("01"));
  // Mismatch answers the current value; a match swaps.
  c.sendHex("01 0300000000000000 2f6373 0500000000000000 77726f6e67 0100000000000000 7a");
  expectReply(c, hex("0300000000000000 6e6577"));
  c.sendHex("01 0300000000000000 2f6373 0300000000000000 6e6577 0100000000000000 7a");
  expectReply(c, hex("0100000000000000 7a"));
  // CHECK: READY when all exist, NOT_READY when one is missing.
  c.sendHex("00 0200000000000000 2f61 0100000000000000 31");
  c.sendHex("04 0100000000000000 0200000000000000 2f61");
  expectReply(c, hex("00"));
  c.sendHex("04 0200000000000000 0200000000000000 2f61 0800000000000000 2f6d697373696e67");
  expectReply(c, hex("01"));
  // delete_key('nope'): 0, and the connection stays.
  c.sendHex("08 0500000000000000 2f6e6f7065");
  expectReply(c, hex("0000000000000000"));
  c.sendHex("06");
  expectReply(c, hex("0200000000000000"));  // /cs and /a
}

TEST_CASE("torch 1.13 dialect: a parked WAIT answers only when its last missing key appears",
          "[wire][torch113]") {
  TestServer server;
  RawClient waiter("127.0.0.1", server.port());
  RawClient writer("127.0.0.1", server.port());
  // wait(['k1', 'k2']), both missing.
  waiter.sendHex("05 0200000000000000 0300000000000000 2f6b31 0300000000000000 2f6b32");
  CHECK(waiter.silentFor(100ms));
  writer.sendHex("00 0300000000000000 2f6b31 0100000000000000 76");  // SET /k1
  writer.sendHex("06");
  expectReply(writer, hex("0100000000000000"));  // the SET has been applied
  CHECK(waiter.silentFor(100ms));
  writer.sendHex("03 0300000000000000 2f6b32 0100000000000000");  // ADD /k2 += 1 creates it
  expectReply(writer, hex("0100000000000000"));
  expectReply(waiter, hex("00"));
  CHECK(waiter.silentFor(50ms));  // exactly one STOP_WAITING
}

TEST_CASE("torch 1.13 dialect: WATCH_KEY pushes torch's event bytes", "[wire][torch113]") {
  TestServer server;
  RawClient watcher("127.0.0.1", server.port());
  RawClient writer("127.0.0.1", server.port());
  watcher.send(hex("07") + blob("/w"));
  expectReply(watcher, hex("03"));

  writer.send(hex("00") + blob("/w") + blob("v1"));
  expectReply(watcher, hex("01") + blob("/w") + blob("") + blob("v1"));
  writer.send(hex("00") + blob("/w") + blob("v2"));
  expectReply(watcher, hex("00") + blob("/w") + blob("v1") + blob("v2"));
  writer.send(hex("08") + blob("/w"));
  expectReply(writer, u64(1));
  expectReply(watcher, hex("02") + blob("/w") + blob("v2") + blob(""));
  writer.send(hex("03") + blob("/w") + u64(5));
  expectReply(writer, u64(5));
  expectReply(watcher, hex("01") + blob("/w") + blob("") + blob("5"));
  writer.send(hex("01") + blob("/w") + blob("5") + blob("6"));
  expectReply(writer, blob("6"));
  expectReply(watcher, hex("00") + blob("/w") + blob("5") + blob("6"));
  // A failed compare_set sends nothing.
  writer.send(hex("01") + blob("/w") + blob("nope") + blob("7"));
  expectReply(writer, blob("6"));
  CHECK(watcher.silentFor(100ms));
}

TEST_CASE(
    "torch 1.13 dialect: WATCH_KEY events and GETs of large values carry the value as it "
    "was, whole, to every watcher",
    "[wire][torch113][shared]") {
  // Values this large are sent by reference to the stored buffer (ReplyQueue), not copied.
  TestServer server;
  std::vector<std::unique_ptr<RawClient>> watchers;
  for (int i = 0; i < 3; ++i) {
    watchers.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
    watchers.back()->send(hex("07") + blob("/w"));
    expectReply(*watchers.back(), hex("03"));
  }
  RawClient writer("127.0.0.1", server.port());
  const std::string first(5000, 'a');
  const std::string second(7000, 'b');
  writer.send(hex("00") + blob("/w") + blob(first));
  writer.send(hex("02") + blob("/w"));  // GET: the value as of now
  writer.send(hex("00") + blob("/w") + blob(second));
  writer.send(hex("08") + blob("/w"));
  expectReply(writer, blob(first) + u64(1));
  for (auto& watcher : watchers) {
    expectReply(*watcher, hex("01") + blob("/w") + blob("") + blob(first));
    expectReply(*watcher, hex("00") + blob("/w") + blob(first) + blob(second));
    expectReply(*watcher, hex("02") + blob("/w") + blob(second) + blob(""));
  }
  CHECK(ddprun::test::eventually(
      [&] { return server.server().stats().pendingReplyBytes == 0; }, 5s,
      [&] {
        return std::to_string(server.server().stats().pendingReplyBytes) + " reply bytes held";
      }));
}

TEST_CASE("torch 1.13 dialect: a request after a timed-out WAIT does not get a stale reply",
          "[wire][torch113]") {
  // torch 1.13's client gives up on a WAIT locally and sends its next request; 1.13 has no
  // CANCEL_WAIT. ddprun drops the parked WAIT when that request arrives, so the key appearing
  // later does not push a STOP_WAITING into the middle of the next reply.
  TestServer server;
  RawClient c("127.0.0.1", server.port());
  RawClient writer("127.0.0.1", server.port());
  c.send(hex("05") + u64(1) + blob("/x"));
  CHECK(c.silentFor(100ms));
  c.sendHex("06");  // GETNUMKEYS
  expectReply(c, u64(0));
  writer.send(hex("00") + blob("/x") + blob("late"));
  writer.sendHex("06");
  expectReply(writer, u64(1));
  CHECK(c.silentFor(100ms));
  c.sendHex("06");
  expectReply(c, u64(1));
}

TEST_CASE("pipelined and fragmented requests are answered in order", "[wire]") {
  TestServer server;
  RawClient c("127.0.0.1", server.port());
  c.handshake2x();
  // Three requests in one write.
  c.send(hex("04") + blob("/p") + u64(1) + hex("04") + blob("/p") + u64(10) + hex("07"));
  expectReply(c, u64(1) + u64(11) + u64(1));
  // One request dribbled a byte at a time.
  const std::string add = hex("04") + blob("/p") + u64(100);
  for (char byte : add) {
    c.send(std::string(1, byte));
    std::this_thread::sleep_for(1ms);
  }
  expectReply(c, u64(111));
}
