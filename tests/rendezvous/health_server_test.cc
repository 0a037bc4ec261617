// HealthServer (include/ddprun/rendezvous/health_server.h) over real loopback sockets: the
// answers (200/503 from the callback, HEAD, 404, 405, 431, 413, 500, the Host rule's 400 and 421)
// and the bounds (a slow or trickling client dropped at the request deadline, the oldest idle
// connection closed to make room, of its own address first, never one being answered, everything
// closed with the server). Other client addresses are other loopback addresses (127.0.0.2...).
// Every wait is bounded by the client's receive timeout or a loop's count.
#include "ddprun/rendezvous/health_server.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ports.h"
#include "raw_client.h"

namespace {

using namespace std::chrono_literals;
using ddprun::rendezvous::healthHostAllowed;
using ddprun::rendezvous::HealthReport;
using ddprun::rendezvous::HealthServer;
using ddprun::rendezvous::HealthServerError;
using ddprun::rendezvous::HealthServerOptions;
using ddprun::rendezvous::parseHealthHostNames;
using ddprun::test::RawClient;

// A HealthServer on an io_context run by a thread of its own, answering from `healthy`.
class Running {
 public:
  explicit Running(HealthServerOptions options = {}, HealthServer::Report report = nullptr,
                   HealthServer::Metrics metrics = nullptr) {
    if (!report) {
      report = [this] {
        return HealthReport{healthy.load(),
                            healthy ? R"({"state": "running"})" : R"({"state": "hung"})"};
      };
    }
    server_ = std::make_unique<HealthServer>(io_, options, std::move(report), std::move(metrics));
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

TEST_CASE("metrics: /metrics answers the callback's text as Prometheus' text format") {
  Running running({}, nullptr, [] { return std::string("# TYPE up gauge\nup 1\n"); });
  const std::string page = get(running.port, "/metrics");
  CHECK(statusLine(page) == "HTTP/1.1 200 OK");
  CHECK(page.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") !=
        std::string::npos);
  CHECK(body(page) == "# TYPE up gauge\nup 1\n");
  // Whatever the health is: a scrape of a hung agent is when its metrics matter most.
  running.healthy = false;
  CHECK(statusLine(get(running.port, "/metrics")) == "HTTP/1.1 200 OK");
  CHECK(statusLine(get(running.port, "/metrics", "POST")) == "HTTP/1.1 405 Method Not Allowed");
  // The same Host rule as /healthz: a rebinding page cannot read it either.
  CHECK(statusLine(ask(running.port, "GET /metrics HTTP/1.1\r\nHost: evil.example\r\n\r\n")) ==
        "HTTP/1.1 421 Misdirected Request");
}

TEST_CASE("metrics: without a metrics callback /metrics is 404 and says what there is") {
  Running running;
  const std::string page = get(running.port, "/metrics");
  CHECK(statusLine(page) == "HTTP/1.1 404 Not Found");
  CHECK(body(page).find("/healthz") != std::string::npos);
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

TEST_CASE("healthz: a client that does not finish its request header by the deadline is dropped") {
  HealthServerOptions options;
  options.requestDeadline = 300ms;
  Running running(options);
  RawClient slow("127.0.0.1", running.port);
  slow.send("GET /healthz HTTP/1.1\r\nHo");
  CHECK(slow.closedWithin(5s));
  CHECK(statusLine(get(running.port)) == "HTTP/1.1 200 OK");  // others are served meanwhile
}

TEST_CASE("healthz: a slowloris that trickles a byte every 50 ms is dropped at the deadline") {
  HealthServerOptions options;
  options.requestDeadline = 300ms;
  Running running(options);
  RawClient slow("127.0.0.1", running.port);
  const auto start = std::chrono::steady_clock::now();
  slow.send("GET /healthz HTTP/1.1\r\n");
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {  // 100 x 50 ms at most
    closed = slow.closedWithin(50ms);
    if (!closed) {
      try {
        slow.send("X");
      } catch (const std::runtime_error&) {
        closed = true;  // reset: the server has closed it
      }
    }
  }
  const auto held = std::chrono::steady_clock::now() - start;
  INFO("held for " << std::chrono::duration_cast<std::chrono::milliseconds>(held).count() << " ms");
  CHECK(closed);
  CHECK(held >= 250ms);  // the bytes it sent kept it no shorter than the deadline...
  CHECK(held < 3s);      // ...and no longer
}

TEST_CASE("healthz: a full server closes its oldest idle connection for a new one") {
  HealthServerOptions options;
  options.maxConnections = 2;
  options.requestDeadline = 10s;  // the idle connections stay until closed for room
  Running running(options);
  RawClient first("127.0.0.1", running.port, "127.0.0.2");
  first.send("GET /heal");
  REQUIRE(first.silentFor(100ms));  // accepted and listed before the second
  RawClient second("127.0.0.1", running.port, "127.0.0.3");
  second.send("GET /heal");
  REQUIRE(second.silentFor(100ms));
  // A third: answered, and the oldest of the two idle ones made room for it.
  CHECK(statusLine(get(running.port)) == "HTTP/1.1 200 OK");
  CHECK(first.closedWithin(2s));
  second.send("thz HTTP/1.1\r\nHost: localhost\r\n\r\n");  // the younger one is still served
  CHECK(statusLine(readAll(second)) == "HTTP/1.1 200 OK");
}

TEST_CASE("healthz: one address over its cap loses its own oldest connection, not another's") {
  HealthServerOptions options;
  options.maxPerSource = 2;
  options.requestDeadline = 10s;
  Running running(options);
  RawClient other("127.0.0.1", running.port, "127.0.0.9");
  other.send("GET /heal");
  REQUIRE(other.silentFor(100ms));
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 3; ++i) {
    flood.push_back(std::make_unique<RawClient>("127.0.0.1", running.port, "127.0.0.2"));
    flood.back()->send("GET /heal");
    REQUIRE(flood.back()->silentFor(100ms));
  }
  CHECK(flood[0]->closedWithin(2s));  // the third from 127.0.0.2 closed its first
  CHECK(flood[1]->silentFor(100ms));
  CHECK(flood[2]->silentFor(100ms));
  other.send("thz HTTP/1.1\r\nHost: localhost\r\n\r\n");  // the older one of 127.0.0.9 stays
  CHECK(statusLine(readAll(other)) == "HTTP/1.1 200 OK");
}

TEST_CASE("healthz: a connection being answered is never closed for room") {
  // An answer far larger than the socket buffers, to a client that does not read it: its write
  // stays in progress, so the server's one slot is taken by a connection being answered.
  HealthServerOptions options;
  options.maxConnections = 1;
  options.requestDeadline = 10s;
  const std::string big = "\"" + std::string(64 * 1024 * 1024, 'x') + "\"";
  Running running(options, [&big] { return HealthReport{true, big}; });
  RawClient answered("127.0.0.1", running.port);
  answered.send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  REQUIRE(answered.receive(15, 5s) == std::string("HTTP/1.1 200 OK"));
  RawClient late("127.0.0.1", running.port);
  CHECK(late.closedWithin(5s));  // closed unanswered: there was no idle one to close
  CHECK(answered.receive(2, 5s) == std::string("\r\n"));  // and the answer goes on
}

TEST_CASE("healthz: probes are answered during a flood of idle connections from another address") {
  HealthServerOptions options;
  options.requestDeadline = 10s;  // the flood stays until it is closed for room
  Running running(options);
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 200; ++i) {
    flood.push_back(std::make_unique<RawClient>("127.0.0.1", running.port, "127.0.0.2"));
    flood.back()->send("GET /heal");
  }
  for (int probe = 0; probe < 20; ++probe) {
    INFO("probe " << probe);
    const auto start = std::chrono::steady_clock::now();
    CHECK(statusLine(get(running.port)) == "HTTP/1.1 200 OK");
    CHECK(std::chrono::steady_clock::now() - start < 1s);
  }
}

TEST_CASE("healthz: Host is required on HTTP/1.1 and must name this server") {
  HealthServerOptions options;
  options.hostNames = {"probe.example"};
  Running running(options);
  CHECK(statusLine(ask(running.port, "GET /healthz HTTP/1.1\r\n\r\n")) ==
        "HTTP/1.1 400 Bad Request");
  CHECK(statusLine(ask(running.port, "GET /healthz HTTP/1.0\r\n\r\n")) == "HTTP/1.1 200 OK");
  CHECK(statusLine(ask(running.port,
                       "GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n")) ==
        "HTTP/1.1 400 Bad Request");
  const std::string rebound =
      ask(running.port, "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n");
  CHECK(statusLine(rebound) == "HTTP/1.1 421 Misdirected Request");
  CHECK(body(rebound) == R"({"error": "the Host header names no address or name of this server"})");
  CHECK(body(rebound).find("running") == std::string::npos);
  for (const char* host : {"localhost", "LocalHost:80", "127.0.0.1", "127.0.0.1:8080", "[::1]:1",
                           "probe.example", "PROBE.example:9000"}) {
    INFO(host);
    CHECK(statusLine(ask(running.port, std::string("GET /healthz HTTP/1.1\r\nHost: ") + host +
                                           "\r\n\r\n")) == "HTTP/1.1 200 OK");
  }
}

TEST_CASE("healthz: the Host rule per bind: loopback, wildcard, one address") {
  const auto address = [](const char* text) { return boost::asio::ip::make_address(text); };
  const std::vector<std::string> none;
  const std::vector<std::string> named{"node-7.cluster.local"};

  const auto loopback = address("127.0.0.1");
  for (const char* host : {"localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "[::1]",
                           "[::1]:8080", "127.0.0.2"}) {
    INFO(host);
    CHECK(healthHostAllowed(host, loopback, none));
  }
  for (const char* host :
       {"evil.example", "evil.example:8080", "10.0.0.1", "localhost.evil", "", ":80", "::1", "[::1",
        "localhost:http", "localhost:123456", "node-7.cluster.local"}) {
    INFO(host);
    CHECK_FALSE(healthHostAllowed(host, loopback, none));
  }
  CHECK(healthHostAllowed("node-7.cluster.local:9000", loopback, named));

  for (const char* wildcard : {"0.0.0.0", "::"}) {
    const auto any = address(wildcard);
    for (const char* host :
         {"10.42.0.17:8080", "192.168.1.1", "[fd00::5]:80", "localhost", "127.0.0.1:8080"}) {
      INFO(wildcard << " " << host);
      CHECK(healthHostAllowed(host, any, none));
    }
    CHECK_FALSE(healthHostAllowed("evil.example", any, none));
    CHECK_FALSE(healthHostAllowed("node-7.cluster.local", any, none));
    CHECK(healthHostAllowed("NODE-7.cluster.local", any, named));
  }

  const auto one = address("10.42.0.17");
  CHECK(healthHostAllowed("10.42.0.17:8080", one, none));
  CHECK(healthHostAllowed("10.42.0.17", one, none));
  CHECK_FALSE(healthHostAllowed("10.42.0.18:8080", one, none));
  CHECK_FALSE(healthHostAllowed("localhost", one, none));
  CHECK_FALSE(healthHostAllowed("127.0.0.1", one, none));
  CHECK(healthHostAllowed("node-7.cluster.local", one, named));
  // A v4 address bound as "::ffff:10.42.0.17" is the same address.
  CHECK(healthHostAllowed("10.42.0.17", address("::ffff:10.42.0.17"), none));
}

TEST_CASE("healthz: configured Host names are DNS names, one bad item is an error naming it") {
  CHECK(parseHealthHostNames("") == std::vector<std::string>{});
  CHECK(parseHealthHostNames("a.example,node-1,,svc_x.local") ==
        std::vector<std::string>{"a.example", "node-1", "svc_x.local"});
  for (const char* bad :
       {"a b", "a..b", ".a", "a.", "x:80", "evil/", "10.0.0.1", "::1", "\x1b[31m"}) {
    INFO(bad);
    try {
      parseHealthHostNames(std::string("ok.example,") + bad);
      FAIL("accepted");
    } catch (const HealthServerError& error) {
      CHECK(error.code() == HealthServerError::Code::kHostName);
      CHECK(std::string(error.what()).find('\x1b') == std::string::npos);
    }
  }
  CHECK_THROWS_AS(parseHealthHostNames(std::string(254, 'a')), HealthServerError);
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
