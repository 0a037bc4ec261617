// StoreBackend: where the agents of a job keep their shared state, as Membership sees it.
// Membership needs connections that can hold keys alive (HoldingStore); how they are made is the
// backend's business: TcpStoreBackend reaches ddprun's store over TCP (the agent-hosted one or a
// ddprun-rendezvous daemon), InProcessStoreBackend shares an in-process store (the agent's unit
// tests, several agents in one process). Another backend (etcd) implements the same interface.
//
// Thread safety: connect() may be called from any thread; each connection is used as its own
// HoldingStore says.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/holding_store.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::launcher {

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // A new connection whose blocking calls give up after `callTimeout`, trying to reach the store
  // for up to `connectTimeout`. Throws rendezvous::StoreConnectionError, or its subclass
  // StoreHandshakeError when what answers is not a store of ours.
  virtual std::unique_ptr<rendezvous::HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                                            std::chrono::milliseconds connectTimeout) = 0;
  // Removes every key that is not the rendezvous' own ("ddprun/..."): the static backend's workers
  // share this store, and a new round must not find the last round's worker keys.
  virtual void clearWorkerKeys() = 0;
  // "host:port" where the store listens: for messages, and the static backend's master address.
  virtual std::string address() const = 0;
};

class TcpStoreBackend final : public StoreBackend {
 public:
  explicit TcpStoreBackend(rendezvous::TcpStoreOptions options) : options_(std::move(options)) {}
  std::unique_ptr<rendezvous::HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                                    std::chrono::milliseconds connectTimeout) override;
  void clearWorkerKeys() override;
  std::string address() const override;

 private:
  rendezvous::TcpStoreOptions options_;
};

class InProcessStoreBackend final : public StoreBackend {
 public:
  // `store` must outlive this object and every connection made from it.
  explicit InProcessStoreBackend(rendezvous::HashStore& store) : store_(store) {}
  std::unique_ptr<rendezvous::HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                                    std::chrono::milliseconds connectTimeout) override;
  void clearWorkerKeys() override;
  std::string address() const override { return "in-process:0"; }

 private:
  rendezvous::HashStore& store_;
};

}  // namespace ddprun::launcher
