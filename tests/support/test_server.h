// TestServer: a RendezvousServer on 127.0.0.1, port 0, serving on a background thread for the
// duration of a test.
#pragma once

#include <memory>

#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::test {

class TestServer {
 public:
  explicit TestServer(rendezvous::ServerOptions options = defaults())
      : server_(std::make_unique<rendezvous::RendezvousServer>(withPortZero(std::move(options)))) {
    server_->start();
  }
  ~TestServer() { server_->stop(); }

  std::uint16_t port() const { return server_->port(); }
  rendezvous::RendezvousServer& server() { return *server_; }

  // A client of this server in the given dialect.
  rendezvous::TcpStoreOptions clientOptions(
      rendezvous::WireDialect dialect = rendezvous::WireDialect::kTorch2) const {
    rendezvous::TcpStoreOptions options;
    options.port = port();
    options.dialect = dialect;
    options.timeout = std::chrono::seconds(10);
    options.connectTimeout = std::chrono::seconds(10);
    return options;
  }

  static rendezvous::ServerOptions defaults() { return {}; }

 private:
  static rendezvous::ServerOptions withPortZero(rendezvous::ServerOptions options) {
    options.host = "127.0.0.1";
    options.port = 0;
    return options;
  }

  std::unique_ptr<rendezvous::RendezvousServer> server_;
};

}  // namespace ddprun::test
