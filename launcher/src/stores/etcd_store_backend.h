// EtcdStoreBackend: the job's rendezvous on an etcd cluster (--rdzv-backend etcd), as Membership
// sees it: every connection is a rendezvous::EtcdStore (a HoldingStore on etcd's v3 API: its holds
// are keys bound to a lease of its own) on an EtcdClient the connections share, every key under
// the job's key prefix (etcd_prefix, "/" by default, then Membership's "ddprun/<run id>/").
// An EtcdStore gives each request its client's timeout, so connections with one call timeout
// share one client: Membership's control connection (read_timeout) one, its heartbeat, watch and
// lapse-report connections (the liveness timeout) another, so that a renewal etcd does not answer
// fails within the liveness timeout, not read_timeout.
//   - holdLapse() is kKeyDeletedOnly: a lease that expires takes its keys and writes nothing
//     else, so the peers report a lost node (Membership's LapseReporter);
//   - tenancy() is kShared: an etcd serves many jobs, each under its own run id, and nothing of
//     one is visible to another; no agent claims the store;
//   - no static facet: the workers never share etcd (a static job is refused before this);
//   - no agent hosts the rendezvous store: etcd is it. Each round's group rank 0 hosts the
//     round's workers' store as on c10d (Round::hostsWorkerStore).
//   - a job with a token (token_file) needs an etcd that admits only its users: the job's token
//     cannot guard records that etcd itself lets anyone write (docs/security.md), so a job with
//     a token on an etcd that serves a client with no user is refused at its first connection.
//
// Thread safety: connect() from any thread (the client is thread-safe); each connection as
// EtcdStore says.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/etcd_client.h"
#include "stores/store_backend.h"

namespace ddprun::launcher {

// The key prefix of every key of the job on etcd, from etcd_prefix: its trailing slashes dropped,
// then one "/" ("" and "/" give "/", "/torchelastic/p2p" gives "/torchelastic/p2p/").
std::string etcdKeyPrefix(const std::string& etcdPrefix);

// How the agent reaches etcd, from the job's rendezvous config: the members (--rdzv-endpoint),
// the https files (cacert/cert/key or ca_cert/ssl_cert/ssl_cert_key), the user (username, its
// password read from password_file here), and read_timeout as the deadline of a call that is
// given none. Throws StoreBackendError when the password file cannot be used (the line names it
// and the fix).
rendezvous::etcd::EtcdClientOptions etcdClientOptions(const RendezvousConfig& config);

class EtcdStoreBackend final : public StoreBackend {
 public:
  // No I/O. Throws StoreBackendError when the client cannot be made (a certificate file that
  // cannot be used: the line names it). `options.timeout` is replaced by each connection's.
  // `probeKey` (under keyPrefix) is what connect() reads: one of the job's own keys, since an
  // etcd user may be allowed the job's prefix alone. `jobHasToken`: the job was given a token,
  // so an etcd without auth is refused (connect()).
  EtcdStoreBackend(rendezvous::etcd::EtcdClientOptions options, std::string keyPrefix,
                   std::string probeKey, bool jobHasToken = false);

  // A new EtcdStore on the client of `callTimeout`, after one read of the probe key within
  // `connectTimeout` that shows etcd answers: unreachable, no leader or too slow is a
  // StoreConnectionError (Membership retries until read_timeout); something that is not etcd,
  // or an etcd that refuses the read for another reason, is a StoreHandshakeError; an etcd that
  // wants a user this client lacks (auth on, no username=) is a StoreAuthError (kUserRequired),
  // and one that refuses the client's user (a wrong password, no permission on the probe key)
  // a StoreAuthError (kUserRefused). With a token, the first connection also asks etcd as a client
  // without a user: an etcd that answers serves anyone, and that is a StoreAuthError (kNoToken),
  // one line naming etcd's auth and token_file.
  std::unique_ptr<rendezvous::HoldingStore> connect(
      std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) override;
  // "etcd at http://h1:2379,http://h2:2379"
  std::string address() const override;
  StoreTenancy tenancy() const override { return StoreTenancy::kShared; }
  std::string unreachableFix() const override;

 private:
  // The client whose requests get `callTimeout`, made on first use.
  std::shared_ptr<rendezvous::etcd::EtcdClient> clientFor(std::chrono::milliseconds callTimeout);
  // Throws StoreAuthError (kNoToken) when etcd serves a read of the probe key to a client with no
  // user; StoreConnectionError when that cannot be told now (asked again at the next connect()).
  void refuseIfOpen(std::chrono::milliseconds connectTimeout);

  rendezvous::etcd::EtcdClientOptions options_;
  std::string keyPrefix_;
  std::string probeKey_;
  const bool jobHasToken_;
  std::atomic<bool> shownClosed_{false};  // etcd refused a client with no user: it has auth
  std::mutex mutex_;                      // guards clients_
  std::map<std::chrono::milliseconds, std::shared_ptr<rendezvous::etcd::EtcdClient>> clients_;
};

}  // namespace ddprun::launcher
