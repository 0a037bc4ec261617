// EtcdStore: the Store contract (c10d's semantics) and HoldingStore's holds on etcd v3, through
// the etcd client (etcd_client.h). docs/etcd.md, "The store on etcd", maps each call to its
// requests.
//
// Every key of the store is keyPrefix + key, and the store never reads, lists, counts or
// deletes a key outside keyPrefix: an etcd is shared by many jobs (and other users), so the
// whole-store operations of c10d are narrowed to this store's prefix: numKeys() counts the keys
// under keyPrefix (c10d counts the whole store), listKeys()/listPrefix()/deletePrefix("") see
// only those.
//
// Blocking calls never poll: get() and wait() read the keys at a revision R and watch the
// missing ones from R + 1 (a watch that lost its history to a compaction reads again and
// watches anew); waitForAnyMissing() likewise watches for deletions.
//
// Holds (HoldLapse::kKeyDeletedOnly): each EtcdStore object is one "connection" with a lease of
// its own, granted by its first hold() with ttl > 0 at ceil(ttl) seconds (etcd raises a TTL
// below its minimum: leaseTtl() is what was granted). A hold binds the key to that lease; a
// later hold() of a key this store holds at the same value is one keep-alive request (one
// renewal); when the lease ends (not renewed within its TTL, or revoked by the destructor) etcd
// deletes every key bound to it and writes nothing else: hold()'s notify arguments are ignored,
// and the peers report a lapse (launcher LapseReporter). A keep-alive that finds the lease gone
// is a StoreConnectionError: this node counts as lost. A hold with ttl 0 is a plain
// create-if-absent put (no lease, so it outlives a crash; the destructor deletes it, and
// release() does, if it still holds this store's value).
//
// Errors: an EtcdError of kind kUnreachable / kUnavailable / kTimeout (a request's own deadline)
// becomes StoreConnectionError (the outcome is unknown); kAuth (wrong credentials), kBadResponse
// and kUnsupported (what answers is no usable etcd) become StoreHandshakeError (retrying will not
// help); the rest StoreError. A get()/wait() whose keys do not appear within its timeout is
// StoreTimeoutError, as everywhere. The EtcdError's what() is kept in the message.
//
// Deadlines: each request gets the client's options().timeout; get()/wait()/waitForAnyMissing()
// wait at most their timeout for the keys, and give up with StoreConnectionError when no member
// has served their watch for a whole request timeout.
//
// A blocking call that ends keeps its watch for the next one on the same keys (up to the watch's
// silence check, 5 s): a caller that waits in short slices (Membership's stop key, the
// LapseReporter's alive keys: 250 ms, to notice a cancel) costs one read a slice, not a new
// watch stream and its connection.
//
// Thread-safe: calls from several threads run at once (the client is); holds and releases of
// one store are serialised among themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/etcd_client.h"
#include "ddprun/rendezvous/holding_store.h"

namespace ddprun::rendezvous {

namespace detail {
class WatchKeeper;  // etcd_store.cc: one watch kept between blocking calls on the same keys
}

struct EtcdStoreOptions {
  etcd::EtcdClientOptions client;  // endpoints, call timeout, credentials, TLS
  // Every key of this store is keyPrefix + key. Non-empty, ends with '/' (e.g.
  // "/torchelastic/p2p/" from torchrun's etcd_prefix). Never the whole keyspace.
  std::string keyPrefix;
};

// A HoldingStore on etcd v3 (holdLapse() == HoldLapse::kKeyDeletedOnly: a lapsed hold's key
// is deleted by etcd when the lease expires; the peers report it). Each EtcdStore object is
// one "connection": it has its own lease, granted on its first hold() with ttl > 0 and
// renewed (one keep-alive request) by every later hold(); release() deletes the key if this
// store's lease holds it; the destructor revokes the lease (best effort, bounded).
class EtcdStore final : public HoldingStore {
 public:
  using Clock = etcd::Clock;

  // No I/O. Several stores may share one client (its connections); each has its own lease.
  // Throws std::invalid_argument for a keyPrefix that is empty or does not end with '/'.
  EtcdStore(std::shared_ptr<etcd::EtcdClient> client, std::string keyPrefix);
  explicit EtcdStore(EtcdStoreOptions options);
  // Revokes the lease (its keys go at once) and deletes this store's ttl-0 holds, within a
  // short deadline; errors are swallowed (an unrevoked lease ends with its TTL anyway).
  ~EtcdStore() override;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  // One wait for all the keys (txns of up to 128 ranges, then one watch for the missing), and
  // their values from it: Store's default follows the wait with a get() of each key, N round
  // trips in a row (a closer of 2,048 read its joiners' slots for 100 s on a busy etcd).
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  // One range read of the key (no watch, no wait).
  std::optional<std::string> tryGet(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  // A ticket is one transaction that no race fails: etcd counts the puts to a key in its version
  // (1 at creation, +1 a put), and the put's previous value says which it was. A marker key of
  // the call's own ("<key>/ticket/<random>"), created in the same transaction and guarding it,
  // makes a repeated attempt find its number instead of taking another. ticketCount() is one
  // read: the key's version. The key's value is empty, no decimal count.
  std::int64_t takeTicket(std::string_view key) override;
  std::int64_t ticketCount(std::string_view key) override;
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(std::string_view key) override;
  // The keys under keyPrefix (not the whole etcd: it is shared).
  std::int64_t numKeys() override;
  void append(std::string_view key, std::string_view value) override;
  // Transactions of up to 128 puts (etcd's --max-txn-ops) and about 1 MiB each: fewer requests.
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::string>& values) override;
  // Every key under keyPrefix, in pages of kMaxListedKeys read at one revision. Unbounded, as
  // the contract says: a job lists its own keys with listPrefix().
  std::vector<std::string> listKeys() override;
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override;
  // One delete request: atomic on etcd.
  std::int64_t deletePrefix(std::string_view prefix) override;

  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override;
  bool release(std::string_view key) override;
  HoldLapse holdLapse() const override { return HoldLapse::kKeyDeletedOnly; }
  std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                             Duration timeout) override;

  const std::string& keyPrefix() const { return keyPrefix_; }
  const std::shared_ptr<etcd::EtcdClient>& client() const { return client_; }

  // For the fencing rule (issue #20, point 4): the TTL etcd granted this store's lease (nothing
  // before the first hold with ttl > 0), and the steady-clock time at which the last grant or
  // keep-alive that etcd acknowledged was sent (the lease runs at least leaseTtl() from then).
  std::optional<std::chrono::seconds> leaseTtl() const;
  std::optional<Clock::time_point> lastAcknowledgedRenewalSent() const;

 private:
  struct Held {
    std::string value;
    bool leased = true;  // false: a ttl-0 hold (a plain key)
  };

  std::string full(std::string_view key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;  // each one's full()
  etcd::Deadline requestDeadline() const;
  // Blocks until every key in `fullKeys` has existed since the call began; StoreTimeoutError
  // after `timeout` (`what` names the call). Returns the value each PUT event or read carried.
  std::map<std::string, std::string> waitFor(const std::vector<std::string>& fullKeys,
                                             Duration timeout, std::string_view what);
  std::string holdLocked(const std::string& key, std::string_view value,
                         std::chrono::milliseconds ttl);

  std::shared_ptr<etcd::EtcdClient> client_;
  std::string keyPrefix_;
  std::unique_ptr<detail::WatchKeeper> keeper_;  // after client_: its watch goes first

  mutable std::mutex holdMutex_;  // guards what follows; held across a hold's requests
  etcd::LeaseId lease_ = 0;       // 0: none granted (or the last one ended)
  std::optional<std::chrono::seconds> leaseTtl_;
  std::optional<Clock::time_point> lastAcknowledgedRenewalSent_;
  std::map<std::string, Held> held_;  // full key -> what this store holds it at
};

}  // namespace ddprun::rendezvous
