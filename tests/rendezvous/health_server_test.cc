// HealthServer (include/ddprun/rendezvous/health_server.h) over real loopback sockets: the
// answers (200/503 from the callback, HEAD, 404, 405, 431, 413, 500) and the bounds (a slow
// client dropped, connections capped, everything closed with the server). Every wait is bounded
// by the client's receive timeout; the server's read timeout is short so the test stays fast.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include "ddprun/rendezvous/health_server.h"
#include "ports.h"
#include "raw_client.h"

namespace {

using namespace std::chrono_literals;
using ddprun::rendezvous::HealthReport;
using ddprun::rendezvous::HealthServer;
using ddprun::rendezvous::HealthServerError;
using ddprun::rendezvous::HealthServerOptions;
using ddprun::test::RawClient;

// A HealthServer on an io_context run by a thread of its own, answering from `healthy`.
class Running {
 public:
  explicit Running(HealthServerOptions options = {}, HealthServer::Report report = nullptr) {
    if (!report) {
      report = [this] {
        return HealthReport{healthy.load(),
                            healthy ? R"({"state": "running"})" : R"({"state": "hung"})"};
      };
    }
    server_ = std::make_unique<HealthServer>(io_, options, std::move(report));
    port = server_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Running() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] { server_.reset(); });
    thread_.join();
  }

  std::atomic<bool> healthy{true};
  std::uint16_t port = 0;

 private:
  boost::asio::io_context io_{1};
  std::unique_ptr<HealthServer> server_;
  std::thread thread_;
};

// Everything the server sends until it closes the connection (each byte within 2 s).
std::string readAll(RawClient& client) {
  std::string text;
  for (int i = 0; i < 100000; ++i) {
    const auto byte = client.receive(1, 2s);
    if (!byte) break;
    text += *byte;
  }
  return text;
}

std::string ask(std::uint16_t port, const std::string& request) {
  RawClient client("127.0.0.1", port);
  client.send(request);
  return readAll(client);
}

std::string get(std::uint16_t port, const std::string& target = "/healthz",
                const std::string& method = "GET") {
  return ask(port, method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
}

std::string statusLine(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}
std::string body(const std::string& response) {
  const auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

}  // namespace

TEST_CASE("healthz answers 200 with the callback's JSON, then 503 once it says unhealthy") {
  Running running;
  const std::string healthy = get(running.port);
  CHECK(statusLine(healthy) == "HTTP/1.1 200 OK");
  CHECK(healthy.find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(healthy.find("Connection: close\r\n") != std::string::npos);
  CHECK(body(healthy) == R"({"state": "running"})");

  running.healthy = false;
  const std::string hung = get(running.port);
  CHECK(statusLine(hung) == "HTTP/1.1 503 Service Unavailable");
  CHECK(body(hung) == R"({"state": "hung"})");
}

TEST_CASE("healthz: HEAD has GET's length without a body, and a query string is the same path") {
  Running running;
  const std::string head = get(running.port, "/healthz", "HEAD");
  CHECK(statusLine(head) == "HTTP/1.1 200 OK");
  CHECK(head.find("Content-Length: 20\r\n") != std::string::npos);
  CHECK(body(head).empty());
  CHECK(statusLine(get(running.port, "/healthz?verbose=1")) == "HTTP/1.1 200 OK");
}

TEST_CASE("healthz: another path is 404, another method 405 naming the allowed ones") {
  Running running;
  CHECK(statusLine(get(running.port, "/")) == "HTTP/1.1 404 Not Found");
  CHECK(statusLine(get(running.port, "/healthz/x")) == "HTTP/1.1 404 Not Found");
  const std::string post = get(running.port, "/healthz", "DELETE");
  CHECK(statusLine(post) == "HTTP/1.1 405 Method Not Allowed");
  CHECK(post.find("Allow: GET, HEAD\r\n") != std::string::npos);
}

TEST_CASE(
    "healthz: a header over the limit is refused with 431, a body with 413, garbage with 400") {
  HealthServerOptions options;
  options.maxHeaderBytes = 1024;
  Running running(options);
  const std::string big =
      ask(running.port,
          "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(4096, 'a') + "\r\n\r\n");
  CHECK(statusLine(big) == "HTTP/1.1 431 Request Header Fields Too Large");
  const std::string withBody =
      ask(running.port, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(statusLine(withBody) == "HTTP/1.1 413 Payload Too Large");
  CHECK(statusLine(ask(running.port, "\x16\x03\x01 not http\r\n\r\n")) ==
        "HTTP/1.1 400 Bad Request");
}

TEST_CASE("healthz: a callback that throws is a 500, and the server goes on") {
  std::atomic<int> calls{0};
  Running running({}, [&calls] {
    if (calls++ == 0) throw std::runtime_error("broken");
    return HealthReport{true, "{}"};
  });
  CHECK(statusLine(get(running.port)) == "HTTP/1.1 500 Internal Server Error");
  CHECK(statusLine(get(running.port)) == "HTTP/1.1 200 OK");
}

TEST_CASE("healthz: a client that does not finish its request within the read timeout is dropped") {
  HealthServerOptions options;
  options.readTimeout = 200ms;
  Running running(options);
  RawClient slow("127.0.0.1", running.port);
  slow.send("GET /healthz HTTP/1.1\r\nHo");
  CHECK(slow.closedWithin(5s));
  CHECK(statusLine(get(running.port)) == "HTTP/1.1 200 OK");  // others are served meanwhile
}

TEST_CASE(
    "healthz: connections over the cap are closed at once, and one is served again once one ends") {
  HealthServerOptions options;
  options.maxConnections = 2;
  options.readTimeout = 10s;  // the two idle connections stay for the whole test
  Running running(options);
  auto first = std::make_unique<RawClient>("127.0.0.1", running.port);
  RawClient second("127.0.0.1", running.port);
  first->send("GET /heal");
  second.send("GET /heal");
  {
    // Accepted after the two (the listen queue is in order), so over the cap.
    RawClient third("127.0.0.1", running.port);
    CHECK(third.closedWithin(5s));
  }
  first.reset();  // one slot frees once the server has seen it close
  std::string answer;
  for (int attempt = 0; attempt < 100 && statusLine(answer) != "HTTP/1.1 200 OK"; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(20ms);
    answer = get(running.port);
  }
  CHECK(statusLine(answer) == "HTTP/1.1 200 OK");
  second.send("thz HTTP/1.1\r\n\r\n");  // the held one is still served
  CHECK(statusLine(readAll(second)) == "HTTP/1.1 200 OK");
}

TEST_CASE("healthz: stopping the server closes its connections and its port") {
  Running running;
  RawClient waiting("127.0.0.1", running.port);
  waiting.send("GET /");
  const std::uint16_t port = running.port;
  running.stop();
  CHECK(waiting.closedWithin(5s));
  CHECK_THROWS(RawClient("127.0.0.1", port));
}

TEST_CASE("healthz: a taken port and an address that is none are errors with their codes") {
  std::uint16_t taken = 0;
  const int listener = ddprun::test::listenOnLoopback(taken);
  boost::asio::io_context io;
  HealthServerOptions options;
  options.port = taken;
  try {
    HealthServer server(io, options, [] { return HealthReport{}; });
    FAIL("a taken port was bound");
  } catch (const HealthServerError& error) {
    CHECK(error.code() == HealthServerError::Code::kBind);
    CHECK(std::string(error.what()).find(std::to_string(taken)) != std::string::npos);
  }
  ::close(listener);
  options.port = 0;
  options.host = "localhost:80";
  try {
    HealthServer server(io, options, [] { return HealthReport{}; });
    FAIL("an address that is none was taken");
  } catch (const HealthServerError& error) {
    CHECK(error.code() == HealthServerError::Code::kAddress);
  }
}
