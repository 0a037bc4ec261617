// HealthServer: a tiny HTTP server for liveness probes (Kubernetes, a load balancer, a script):
// `GET /healthz` (and HEAD) answers 200 or 503 with a JSON body, both taken from a callback at
// the moment of the request. The ddprun agent serves its AgentSnapshot with it
// (TORCHELASTIC_HEALTH_CHECK_PORT) and ddprun-rendezvous its own state (--health-port).
//
// HTTP is Boost.Beast's (no parsing of our own). What a probe port on a shared or exposed machine
// must bound is bounded: a request's header (maxHeaderBytes) and no body at all, the time a
// connection has to send its request (readTimeout: a slow client is dropped, never waited on),
// and the connections open at once (maxConnections: one over it is closed at once). Every answer
// ends its connection (Connection: close): a probe makes one request per connection, and no idle
// keep-alive connection can pile up. Other paths answer 404, other methods 405, a header over
// the limit 431, a malformed request 400.
//
// It lives here, in ddprun::rendezvous_server, because both the daemon and the agent use it and
// the launcher depends on the rendezvous module, never the reverse (docs/architecture.md).
//
// Thread safety: it runs on the io_context it is given, and the callback runs on that context's
// thread, so a callback may read state owned by that thread without a lock. Construct, destroy
// and call port() on that thread (or while the context is not running).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace boost::asio {
class io_context;
}

namespace ddprun::rendezvous {

// What /healthz answers now: 200 when healthy, else 503; the body is JSON.
struct HealthReport {
  bool healthy = true;
  std::string json;
};

struct HealthServerOptions {
  // The one address to listen on: loopback unless the operator widens it (docs/security.md).
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port (port() says which)
  std::size_t maxHeaderBytes = 8 * 1024;
  std::chrono::milliseconds readTimeout = std::chrono::seconds(5);
  std::size_t maxConnections = 32;
};

class HealthServerError : public std::runtime_error {
 public:
  enum class Code {
    kAddress,  // `host` is not an IP address
    kBind,     // the address or port cannot be bound (in use, not this machine's, privileged)
  };
  HealthServerError(Code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

class HealthServer {
 public:
  using Report = std::function<HealthReport()>;

  // Binds and listens now (a bad address or a taken port throws HealthServerError here), then
  // accepts on `io` as it runs.
  HealthServer(boost::asio::io_context& io, HealthServerOptions options, Report report);
  // Closes the listener and every connection; the callback is not called again.
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  std::uint16_t port() const;
  // "host:port" as bound, e.g. "127.0.0.1:8080".
  std::string address() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
