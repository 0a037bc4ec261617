// DaemonHealth: ddprun-rendezvous's /healthz (--health-port). A HealthServer on a small
// io_context and thread of its own: the store's serving thread stays the store's alone (its
// io_context takes no lock, docs/architecture.md), and what the answer needs is readable from any
// thread (RendezvousServer::stats(), an atomic flag).
//
// 200 while the store serves, 503 once drain() says it is shutting down; the body is JSON:
// {"service": "ddprun-rendezvous", "version", "state": "serving"|"draining", "healthy",
//  "address", "uptime_s", "connections", "accepted", "refused", "protocol_errors",
//  "refused_handshakes", "keys", "stored_bytes", "pending_reply_bytes"}.
// /metrics answers the same figures, and the requests served per op, as Prometheus metrics
// (docs/metrics.md, "ddprun-rendezvous").
//
// Thread safety: drain() from any thread; construct and destroy on one.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "ddprun/rendezvous/health_server.h"
#include "ddprun/rendezvous/server.h"

namespace ddprun::rendezvous {

class DaemonHealth {
 public:
  // Listens now (throws HealthServerError) and answers on its own thread. `server` must outlive it.
  DaemonHealth(const HealthServerOptions& options, const RendezvousServer& server,
               std::string version);
  // Stops answering and joins the thread.
  ~DaemonHealth();
  DaemonHealth(const DaemonHealth&) = delete;
  DaemonHealth& operator=(const DaemonHealth&) = delete;

  std::string address() const { return address_; }
  void drain() { draining_ = true; }

 private:
  HealthReport report() const;
  std::string metrics() const;

  const RendezvousServer& server_;
  const std::string version_;
  const std::string storeAddress_;  // read once: the store's address() belongs to its thread
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<bool> draining_{false};
  boost::asio::io_context io_{1};
  std::unique_ptr<HealthServer> health_;
  std::string address_;
  std::thread thread_;
};

}  // namespace ddprun::rendezvous
