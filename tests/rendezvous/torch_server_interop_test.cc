// ddprun's C++ client against torch's own TCPStore servers (1.13, and 2.6 from the trixie chroot),
// as far as each protocol allows.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "ddprun/rendezvous/tcp_store.h"
#include "subprocess.h"

using namespace ddprun::rendezvous;
using ddprun::test::portFromListeningLine;
using ddprun::test::Subprocess;
using namespace std::chrono_literals;

namespace {

constexpr int kSkip = 77;

// torch's TCPStore server in a child python; skips the test (exit 77) when that torch is absent.
std::unique_ptr<Subprocess> startTorchServer(const char* python, std::uint16_t& port) {
  // stdin stays open (a pipe nobody writes) so the server lives until the test ends.
  auto server = std::make_unique<Subprocess>(
      std::vector<std::string>{"/bin/sh", "-c",
                               fmt::format("sleep 3600 | {} {}/tests/interop/torch_store_server.py",
                                           python, DDPRUN_SOURCE_DIR)});
  const auto line = server->readLine(120s);
  if (!line) {
    if (server->wait(5s) == kSkip ||
        server->errors().find("chroot not found") != std::string::npos) {
      std::cout << "skipped: " << server->errors() << std::endl;
      std::exit(kSkip);
    }
    FAIL("torch TCPStore server did not start within 120 s:\n"
         << ddprun::test::describeAll({server.get()}));
  }
  port = static_cast<std::uint16_t>(portFromListeningLine(*line));
  REQUIRE(port > 0);
  return server;
}

TcpStoreOptions against(std::uint16_t port, WireDialect dialect) {
  TcpStoreOptions options;
  options.port = port;
  options.dialect = dialect;
  options.timeout = 10s;
  options.connectTimeout = 5s;
  return options;
}

// The operations every torch server has, through ddprun's client.
void exerciseCommonOps(Store& store, Store& other) {
  store.set("k", "v");
  CHECK(store.get("k") == "v");
  CHECK(store.add("c", 5) == 5);
  CHECK(store.add("c", -2) == 3);
  CHECK(store.get("c") == "3");
  CHECK(store.compareSet("cs", "", "new") == "new");
  CHECK(store.compareSet("cs2", "x", "y") == "x");
  CHECK(store.compareSet("cs", "new", "z") == "z");
  CHECK(store.check({"k", "c"}));
  CHECK_FALSE(store.check({"k", "nope"}));
  CHECK(store.deleteKey("k"));
  CHECK_FALSE(store.deleteKey("k"));
  store.multiSet({"m1", "m2"}, {"1", "22"});
  CHECK(store.multiGet({"m1", "m2"}) == std::vector<std::string>{"1", "22"});
  store.append("ap", "ab");
  store.append("ap", "c");
  CHECK(store.get("ap") == "abc");
  CHECK_THROWS_AS(store.wait({"never"}, 200ms), StoreTimeoutError);
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    other.set("late", "1");
  });
  CHECK(store.get("late") == "1");
  later.join();
  CHECK(store.add("c", 1) == 4);  // in sync after the timeout
}

}  // namespace

TEST_CASE("ddprun's client speaks torch 1.13's server in the 1.13 dialect", "[torch113]") {
  std::uint16_t port = 0;
  auto server = startTorchServer(DDPRUN_TORCH113_PYTHON, port);
  TcpStore store(against(port, WireDialect::kTorch113));
  TcpStore other(against(port, WireDialect::kTorch113));
  exerciseCommonOps(store, other);
  CHECK_THROWS_AS(store.listKeys(), StoreUnsupportedError);
}

TEST_CASE("the 2.x handshake against torch 1.13's server fails with a hint", "[torch113]") {
  std::uint16_t port = 0;
  auto server = startTorchServer(DDPRUN_TORCH113_PYTHON, port);
  TcpStoreOptions options = against(port, WireDialect::kTorch2);
  options.connectTimeout = 500ms;
  CHECK_THROWS_WITH(TcpStore(options), Catch::Contains("torch-1.13 dialect"));
}

TEST_CASE("ddprun's client speaks torch 2.6's server in the 2.x dialect", "[torch2]") {
  std::uint16_t port = 0;
  auto server = startTorchServer(DDPRUN_TORCH2_PYTHON, port);
  TcpStore store(against(port, WireDialect::kTorch2));
  TcpStore other(against(port, WireDialect::kTorch2));
  exerciseCommonOps(store, other);
}
