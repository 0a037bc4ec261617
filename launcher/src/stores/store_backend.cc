#include "stores/store_backend.h"

#include <fmt/format.h>

#include "ddprun/common/local_address.h"
#include "stores/store_keys.h"

namespace ddprun::launcher {

std::unique_ptr<rendezvous::HoldingStore> TcpStoreBackend::connect(
    std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) {
  rendezvous::TcpStoreOptions options = options_;
  options.timeout = callTimeout;
  options.connectTimeout = connectTimeout;
  return std::make_unique<rendezvous::TcpStore>(options);
}

void TcpStoreBackend::clearWorkerKeys() {
  // Without the client's "/" prefix, so that torch's keys (under "/" too, as the workers wrote
  // them) and ours are listed alike.
  rendezvous::TcpStoreOptions raw = options_;
  raw.keyPrefix = "";
  rendezvous::TcpStore store(raw);
  const std::string own = fmt::format("{}{}", options_.keyPrefix, kRendezvousKeyPrefix);
  for (const std::string& key : store.listKeys()) {
    if (!key.starts_with(own)) store.deleteKey(key);
  }
}

std::string TcpStoreBackend::address() const {
  return fmt::format("{}:{}", options_.host, options_.port);
}

std::string TcpStoreBackend::addressTowardStore() const {
  return common::localAddressToward(options_.host, options_.port).value_or("127.0.0.1");
}

std::unique_ptr<rendezvous::HoldingStore> InProcessStoreBackend::connect(
    std::chrono::milliseconds callTimeout, std::chrono::milliseconds) {
  auto connection = store_.connect();
  connection->setTimeout(callTimeout);
  return connection;
}

void InProcessStoreBackend::clearWorkerKeys() {
  for (const std::string& key : store_.listKeys()) {
    if (!key.starts_with(kRendezvousKeyPrefix)) store_.deleteKey(key);
  }
}

}  // namespace ddprun::launcher
