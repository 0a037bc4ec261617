// HealthServer: a tiny HTTP server for liveness probes (Kubernetes, a load balancer, a script)
// and scrapers (Prometheus): `GET /healthz` (and HEAD) answers 200 or 503 with a JSON body, both
// taken from a callback at the moment of the request; `GET /metrics`, when a metrics callback is
// given, answers 200 with its text in Prometheus' exposition format (metrics_text.h). The ddprun
// agent serves its AgentSnapshot and counters with it (TORCHELASTIC_HEALTH_CHECK_PORT) and
// ddprun-rendezvous its own state (--health-port). Both paths have the same protections below.
//
// HTTP is Boost.Beast's (no parsing of our own). What a probe port on a shared or exposed machine
// must bound is bounded: a request's header (maxHeaderBytes) and no body at all, the time a
// connection has to send its whole request header (requestDeadline: a slow or trickling client is
// dropped then, never waited on), and the connections open at once (maxConnections, and
// maxPerSource from one address). A new connection is never turned away because others sit idle:
// when its address already holds maxPerSource, or the server maxConnections, the OLDEST connection
// (of that address, or of all) that has not yet sent a whole request is closed to make room; one
// being answered is never closed, and only when every connection is being answered is the new one
// closed unanswered. So a probe is answered however many idle or trickling connections another
// address holds. Every answer ends its connection (Connection: close): a probe makes one request
// per connection, and no idle keep-alive connection can pile up. Other paths answer 404, other
// methods 405, a header over the limit 431, a malformed request 400.
//
// The `Host:` header is checked (healthHostAllowed), so that a web page on the node cannot read
// /healthz through a DNS name it rebinds to this address: an HTTP/1.1 request without one is 400,
// one naming neither this server's address nor a configured name 421.
//
// It lives here, in ddprun::rendezvous_server, because both the daemon and the agent use it and
// the launcher depends on the rendezvous module, never the reverse (docs/architecture.md).
//
// Thread safety: it runs on the io_context it is given, and the callback runs on that context's
// thread, so a callback may read state owned by that thread without a lock. Construct, destroy
// and call port() on that thread (or while the context is not running).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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
  // From accept to the end of the request header; the answer's write has as long again. Well
  // under a kubelet's 1 s probe timeout, which covers connect, request and answer.
  std::chrono::milliseconds requestDeadline{500};
  std::size_t maxConnections = 32;
  std::size_t maxPerSource = 8;  // from one client address (IPv4-mapped IPv6 counts as IPv4)
  // Host names a `Host:` header may give besides the addresses healthHostAllowed() takes (a
  // Service or node name), from parseHealthHostNames().
  std::vector<std::string> hostNames;
};

class HealthServerError : public std::runtime_error {
 public:
  enum class Code {
    kAddress,   // `host` is not an IP address
    kBind,      // the address or port cannot be bound (in use, not this machine's, privileged)
    kHostName,  // a configured Host name is no DNS name
  };
  HealthServerError(Code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// Whether a request's `Host:` value (host, optionally ":port"; an IPv6 literal in brackets) may
// reach a server bound to `bound`. The port is not compared (a forwarded port differs). Taken:
//   - a name in `names` (case-insensitive), on any bind;
//   - the bound address itself, as an IP literal;
//   - on a loopback bind: "localhost" and any loopback literal (127.0.0.1, ::1);
//   - on a wildcard bind (0.0.0.0, ::): "localhost" and ANY IP literal, since the server answers
//     on every address of the machine (a kubelet sends Host: <pod IP>:<port>) and a rebinding
//     page can only send the DNS name it was loaded from, never an IP literal.
// Anything else, a DNS name above all, is refused; so is a value that is no host[:port].
bool healthHostAllowed(std::string_view host, const boost::asio::ip::address& bound,
                       const std::vector<std::string>& names);

// "name1,name2" (the form of DDPRUN_HEALTH_CHECK_HOSTS and --health-hosts) -> the names; empty
// items are skipped. Throws HealthServerError(kHostName) naming the first item that is no DNS
// name (letters, digits, '-', '_' and '.', at most 253 characters, no empty label) or an IP literal
// (those need no configuring).
std::vector<std::string> parseHealthHostNames(std::string_view list);

class HealthServer {
 public:
  using Report = std::function<HealthReport()>;
  // /metrics' body (text exposition format); nothing: /metrics answers 404.
  using Metrics = std::function<std::string()>;

  // Binds and listens now (a bad address or a taken port throws HealthServerError here), then
  // accepts on `io` as it runs.
  HealthServer(boost::asio::io_context& io, HealthServerOptions options, Report report,
               Metrics metrics = nullptr);
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
