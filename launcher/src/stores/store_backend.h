// StoreBackend: where the agents of a job keep their shared state, as Membership sees it.
// Membership needs connections that can hold keys alive (HoldingStore); how they are made is the
// backend's business: TcpStoreBackend reaches ddprun's store over TCP (the agent-hosted one or a
// ddprun-rendezvous daemon), InProcessStoreBackend shares an in-process store (the agent's unit
// tests, several agents in one process). Another backend (etcd) is one more implementation of
// this interface and one more entry in the factory (store_backends.h); Membership asks only:
//   - connect(): a HoldingStore connection, whose holdLapse() says whether the store reports a
//     lapsed hold itself or the peers must (Membership runs a LapseReporter for the latter);
//   - tenancy(): whether the store is this job's alone (the job claims it: an agent of another
//     run id is refused) or shared by many jobs (each keeps to its run's prefix, claims nothing);
//   - staticFacet(): the static backend's extras, where the store has them.
//
// Thread safety: connect() may be called from any thread; each connection is used as its own
// HoldingStore says.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "ddprun/rendezvous/hash_store.h"
#include "ddprun/rendezvous/holding_store.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::launcher {

// Whom a rendezvous store serves.
enum class StoreTenancy {
  // This job alone, one run at a time (ddprun's store: hosted by an agent of the job, or a
  // ddprun-rendezvous daemon given to it). Every agent of the run holds the store-wide active-run
  // key, so that an agent of another run id is refused rather than left waiting beside it.
  kOneJob,
  // Many jobs at once (an etcd a cluster shares). A job reads and writes only under its run's
  // prefix, never lists outside it and claims nothing store-wide: another run id is another job,
  // and the two never see each other's keys.
  kShared,
};

// What only the static backend needs of its store: the workers share it (torchrun's static
// rendezvous points MASTER_ADDR:MASTER_PORT at the rendezvous store itself).
class StaticStoreFacet {
 public:
  virtual ~StaticStoreFacet() = default;
  // Removes every key that is not the rendezvous' own ("ddprun/..."): a new round must not find
  // the last round's worker keys.
  virtual void clearWorkerKeys() = 0;
  // "host:port" where the store listens (the port it really got with --master-port 0): the
  // workers' MASTER_ADDR:MASTER_PORT.
  virtual std::string masterAddress() const = 0;
};

// A backend that cannot be made from what the job was given (a certificate file that cannot be
// used): what() is one line naming the fix.
class StoreBackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // A new connection whose blocking calls give up after `callTimeout`, trying to reach the store
  // for up to `connectTimeout`. Throws rendezvous::StoreConnectionError, or its subclass
  // StoreHandshakeError when what answers is not a store of ours.
  virtual std::unique_ptr<rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) = 0;
  // Where the store is, for messages ("host:port", or an etcd's endpoints).
  virtual std::string address() const = 0;
  // What the user should do when the store did not answer within read_timeout: the end of that
  // one line.
  virtual std::string unreachableFix() const {
    return "start the agent that hosts it (or ddprun-rendezvous) first, or check --rdzv-endpoint";
  }
  virtual StoreTenancy tenancy() const = 0;
  // This host's address toward the store, once it answers: what a node advertises when its
  // address could not be worked out at start (the store's name did not resolve yet).
  virtual std::string addressTowardStore() const { return "127.0.0.1"; }
  // The static backend's extras, or nullptr where this store has none (Membership refuses a
  // static job on such a backend).
  virtual StaticStoreFacet* staticFacet() { return nullptr; }
};

class TcpStoreBackend final : public StoreBackend, public StaticStoreFacet {
 public:
  explicit TcpStoreBackend(rendezvous::TcpStoreOptions options) : options_(std::move(options)) {}
  std::unique_ptr<rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) override;
  std::string address() const override;
  std::string addressTowardStore() const override;
  // A ddprun store serves one job at a time: an agent-hosted one belongs to its job, and a
  // ddprun-rendezvous daemon takes the next job once the last one's agents have left.
  StoreTenancy tenancy() const override { return StoreTenancy::kOneJob; }
  StaticStoreFacet* staticFacet() override { return this; }

  // StaticStoreFacet:
  void clearWorkerKeys() override;
  std::string masterAddress() const override { return address(); }

 private:
  rendezvous::TcpStoreOptions options_;
};

class InProcessStoreBackend final : public StoreBackend, public StaticStoreFacet {
 public:
  // `store` must outlive this object and every connection made from it. `tenancy` lets the tests
  // play a shared store (what the agents do over an etcd) on the in-process one.
  explicit InProcessStoreBackend(rendezvous::HashStore& store,
                                 StoreTenancy tenancy = StoreTenancy::kOneJob)
      : store_(store), tenancy_(tenancy) {}
  std::unique_ptr<rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) override;
  std::string address() const override { return "in-process:0"; }
  StoreTenancy tenancy() const override { return tenancy_; }
  StaticStoreFacet* staticFacet() override { return this; }

  // StaticStoreFacet:
  void clearWorkerKeys() override;
  std::string masterAddress() const override { return address(); }

 private:
  rendezvous::HashStore& store_;
  StoreTenancy tenancy_;
};

}  // namespace ddprun::launcher
