// TcpStore, the client: connecting with retries, errors that say where and what, surviving
// timeouts and server restarts, and many threads on one counter.
#include "ddprun/rendezvous/tcp_store.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "ddprun/rendezvous/server.h"
#include "ports.h"
#include "test_server.h"

using namespace ddprun::rendezvous;
using ddprun::test::freePort;
using ddprun::test::TestServer;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

ServerOptions serverOn(std::uint16_t port) {
  ServerOptions options;
  options.port = port;
  return options;
}

}  // namespace

TEST_CASE("a client started before its server connects once the server is up", "[tcp_store]") {
  const std::uint16_t port = freePort();
  std::unique_ptr<RendezvousServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<RendezvousServer>(serverOn(port));
    server->start();
  });
  TcpStoreOptions options;
  options.port = port;
  options.connectTimeout = 10s;
  const auto started = Clock::now();
  TcpStore store(options);
  const auto waited = Clock::now() - started;
  starter.join();
  CHECK(waited >= 250ms);
  // Backoff is capped (1 s, +/- 50 % jitter): no long sleep after the server appears. The rest
  // is slack for a loaded machine.
  CHECK(waited < 5s);
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

TEST_CASE("a connect that cannot succeed says where, how long and why", "[tcp_store]") {
  const std::uint16_t port = freePort();
  TcpStoreOptions options;
  options.port = port;
  options.connectTimeout = 400ms;
  try {
    TcpStore store(options);
    FAIL("connected to a port nobody listens on");
  } catch (const StoreConnectionError& error) {
    const std::string text = error.what();
    CHECK_THAT(text, Catch::Contains(fmt::format("store 127.0.0.1:{}", port)));
    CHECK_THAT(text, Catch::Contains("attempts"));
    CHECK_THAT(text, Catch::Contains("refused"));
    CHECK_THAT(text, Catch::Contains("is ddprun-rendezvous"));
  }
}

TEST_CASE("an unresolvable host is reported by name", "[tcp_store]") {
  TcpStoreOptions options;
  options.host = "no-such-host.invalid";
  options.connectTimeout = 200ms;
  CHECK_THROWS_WITH(TcpStore(options),
                    Catch::Contains("cannot resolve host 'no-such-host.invalid'"));
}

TEST_CASE("a timed-out wait names the store, the keys and the time, and the client stays usable",
          "[tcp_store]") {
  TestServer server;
  for (WireDialect dialect : {WireDialect::kTorch2, WireDialect::kTorch113}) {
    TcpStore store(server.clientOptions(dialect));
    try {
      store.wait({"never", "nor-this"}, 150ms);
      FAIL("wait did not time out");
    } catch (const StoreTimeoutError& error) {
      CHECK_THAT(error.what(), Catch::Contains(fmt::format("store 127.0.0.1:{}", server.port())));
      CHECK_THAT(error.what(), Catch::Contains("after 150 ms"));
      CHECK_THAT(error.what(),
                 Catch::Contains("'never', 'nor-this'"));  // quoted, escaped (shownKey)
    }
    // The keys appearing now, which completes the wait on the server unless it was cancelled,
    // must not confuse the next replies: a stale STOP_WAITING in front of them would shift every
    // later reply by one byte, which exact values catch.
    TcpStore other(server.clientOptions());
    other.set("never", "1");
    other.set("nor-this", "2");
    REQUIRE(other.check({"never", "nor-this"}));  // applied before the next request below
    const std::string counter = fmt::format("after-timeout-{}", dialectName(dialect));
    CHECK(store.add(counter, 1) == 1);
    CHECK(store.add(counter, 41) == 42);
    const std::string marker("\x01\x02 distinctive \xff", 16);
    store.set("marker", marker);
    CHECK(store.get("marker") == marker);
    CHECK(store.get("never") == "1");
    CHECK(store.numKeys() == (dialect == WireDialect::kTorch2 ? 4 : 5));
    other.deleteKey("never");
    other.deleteKey("nor-this");
  }
}

TEST_CASE("a connection that breaks mid-call names the store, the keys and how long",
          "[tcp_store]") {
  const std::uint16_t port = freePort();
  auto server = std::make_unique<RendezvousServer>(serverOn(port));
  server->start();
  TcpStoreOptions options;
  options.port = port;
  options.connectTimeout = 300ms;
  TcpStore store(options);
  store.set("k", "v");
  server.reset();  // the connection breaks under the client
  const std::string where = fmt::format("store 127.0.0.1:{}: ", port);
  try {
    store.wait({"a", "b"}, 5s);
    FAIL("wait on a closed connection succeeded");
  } catch (const StoreConnectionError& error) {
    CHECK_THAT(error.what(), Catch::StartsWith(where + "wait 'a', 'b' failed after "));
    CHECK_THAT(error.what(), Catch::Matches(".* failed after [0-9]+ ms: .*"));
  }
  // The next call reconnects, and a failure to do so names the call too.
  try {
    store.check({"c", "d"});
    FAIL("check without a server succeeded");
  } catch (const StoreConnectionError& error) {
    CHECK_THAT(error.what(), Catch::StartsWith(where + "check 'c', 'd': cannot connect after "));
    CHECK_THAT(error.what(), Catch::Contains("refused"));
  }
}

TEST_CASE("a server that does not answer is reported with the key and the time waited",
          "[tcp_store]") {
  // A listener that never accepts: the kernel completes the connection, nobody ever answers.
  std::uint16_t port = 0;
  const int fd = ddprun::test::listenOnLoopback(port, 8);
  REQUIRE(fd >= 0);
  TcpStoreOptions options;
  options.port = port;
  options.dialect = WireDialect::kTorch113;  // no handshake: connecting succeeds
  options.timeout = 200ms;
  TcpStore store(options);
  const auto started = Clock::now();
  try {
    store.add("counter", 1);
    FAIL("add without an answer succeeded");
  } catch (const StoreConnectionError& error) {
    const std::string text = error.what();
    CHECK(Clock::now() - started >= 190ms);
    CHECK_THAT(text, Catch::StartsWith(fmt::format(
                         "store 127.0.0.1:{}: add 'counter' failed after ", options.port)));
    CHECK_THAT(text, Catch::Matches(".* failed after [0-9]{3,} ms: timed out waiting for a reply"));
  }
  ::close(fd);
}

TEST_CASE("a server restart costs one failed call, then the client reconnects", "[tcp_store]") {
  const std::uint16_t port = freePort();
  auto server = std::make_unique<RendezvousServer>(serverOn(port));
  server->start();
  TcpStoreOptions options;
  options.port = port;
  options.connectTimeout = 5s;
  TcpStore store(options);
  store.set("k", "v");
  server.reset();  // everything is gone, connections included
  CHECK_THROWS_AS(store.get("k"), StoreConnectionError);
  server = std::make_unique<RendezvousServer>(serverOn(port));
  server->start();
  store.set("k", "again");
  CHECK(store.get("k") == "again");
}

TEST_CASE("a failed add names the key and the likely reason", "[tcp_store]") {
  TestServer server;
  TcpStore store(server.clientOptions());
  store.set("text", "not a number");
  try {
    store.add("text", 1);
    FAIL("add on text succeeded");
  } catch (const StoreConnectionError& error) {
    CHECK_THAT(error.what(), Catch::Contains("add 'text' failed"));
    CHECK_THAT(error.what(), Catch::Contains("not an integer"));
  }
  CHECK(store.get("text") == "not a number");  // reconnected
}

TEST_CASE(
    "a value over the client's reply limit is that key's error, typed, and the next call "
    "reconnects",
    "[tcp_store]") {
  TestServer server;
  TcpStore writer(server.clientOptions());
  writer.set("big", std::string(200 * 1024, 'b'));
  writer.set("small", "s");
  TcpStoreOptions options = server.clientOptions();
  options.maxReplyValueBytes = 64 * 1024;
  TcpStore reader(options);
  // Neither get nor tryGet (a compareSet's reply) buffers the value; each says how large it is.
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) {
        reader.get("big");
      } else {
        reader.tryGet("big");
      }
      FAIL("a 200 KiB value was read under a 64 KiB limit");
    } catch (const StoreValueTooLargeError& error) {
      CHECK(error.bytes() == 200 * 1024);
      CHECK(error.limit() == 64 * 1024);
      CHECK_THAT(error.what(), Catch::Contains("'big'"));
    }
    CHECK(reader.get("small") == "s");  // the half-read reply is gone with its connection
  }
}

TEST_CASE("many threads hammering one counter get an exact count", "[tcp_store]") {
  TestServer server;
  constexpr int kThreads = 16;
  constexpr int kAdds = 2000;
  SECTION("one connection per thread") {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        TcpStore store(server.clientOptions());
        for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
      });
    }
    for (auto& t : threads) t.join();
  }
  SECTION("one connection shared by every thread") {
    TcpStore shared(server.clientOptions());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kAdds; ++i) shared.add("counter", 1);
      });
    }
    for (auto& t : threads) t.join();
  }
  TcpStore check(server.clientOptions());
  CHECK(check.get("counter") == std::to_string(kThreads * kAdds));
}

TEST_CASE("keys carry torch's '/' prefix on the wire and listKeys hides other namespaces",
          "[tcp_store]") {
  TestServer server;
  TcpStore store(server.clientOptions());
  store.set("k", "v");
  TcpStoreOptions raw = server.clientOptions();
  raw.keyPrefix = "";
  TcpStore unprefixed(raw);
  CHECK(unprefixed.get("/k") == "v");
  unprefixed.add("init/", 1);  // what torch's workers register, without a slash
  CHECK(store.numKeys() == 2);
  CHECK(store.listKeys() == std::vector<std::string>{"k"});
}

TEST_CASE("a holder whose connection closes wakes whoever waits on its notify key",
          "[tcp_store][hold]") {
  TestServer server;
  TcpStore watcher(server.clientOptions());
  std::string stop;
  std::thread waiting([&] { stop = watcher.get("round/1/stop"); });
  {
    TcpStore agent(server.clientOptions());
    CHECK(agent.hold("alive/7", "node 7", 0ms, "round/1/stop", "node 7 lost") == "node 7");
    TcpStore other(server.clientOptions());
    CHECK(other.hold("alive/7", "someone else", 0ms, "", "") == "node 7");  // not granted
    CHECK(other.check({"alive/7"}));
  }  // the agent's connection closes as if the process had died
  waiting.join();
  CHECK(stop == "node 7 lost");
  CHECK_FALSE(watcher.check({"alive/7"}));
}

TEST_CASE("a hold lapses without renewals, and a release is quiet", "[tcp_store][hold]") {
  TestServer server;
  TcpStore agent(server.clientOptions());
  TcpStore watcher(server.clientOptions());
  agent.hold("alive/1", "n1", 300ms, "stop", "n1 lapsed");
  const auto started = Clock::now();
  CHECK(watcher.get("stop") == "n1 lapsed");
  const auto took = Clock::now() - started;
  CHECK(took >= 250ms);
  CHECK(took < 5s);  // a loaded machine's slack; a hold that never lapsed would block 10 s
  agent.hold("alive/2", "n2", 0ms, "stop2", "n2 lost");
  CHECK(agent.release("alive/2"));
  CHECK_FALSE(watcher.check({"alive/2"}));
  CHECK_FALSE(watcher.check({"stop2"}));
  TcpStore old(server.clientOptions(WireDialect::kTorch113));
  CHECK_THROWS_AS(old.hold("k", "v", 0ms, "", ""), StoreUnsupportedError);
}
