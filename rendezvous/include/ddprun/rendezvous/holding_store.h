// HoldingStore: a Store whose connection can keep keys alive, the liveness operations the agents'
// rendezvous is built on. A node holds its "alive" key; when its connection closes or it stops
// renewing, the hold lapses and the key goes, so a lost node shows without anyone polling.
//
// Who tells the others is the backend's capability (holdLapse()):
//   - kStoreNotifies: the store itself writes the holder's notice into a key the others wait on
//     (ddprun's store: the HOLD/RELEASE extension ops, and HashStore). One write, by the one
//     party that knows, at the moment it knows.
//   - kKeyDeletedOnly: the store only deletes the held key (etcd: a lease expires with the keys
//     bound to it, and etcd writes nothing else). The peers watch the held keys
//     (waitForAnyMissing) and write the notice themselves, create-if-absent (compareSet from ""),
//     so that the first report wins as it does when the store writes it.
// Membership works with both (launcher/src/membership/lapse_reporter.h).
//
// Implementations: TcpStore (ddprun's server) and HashStore (the in-process store, whose
// connect() gives each user a connection of its own; either capability, for the tests).
//
// Thread safety: as Store.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

// What a store does when a hold lapses (its connection closed, or no renewal within its ttl).
enum class HoldLapse {
  // The key goes with its last holder, and the store writes the holder's notify value to its
  // notify key unless that key exists.
  kStoreNotifies,
  // The key goes with its last holder; nothing else is written (hold()'s notify arguments are
  // ignored). Whoever must know watches the key.
  kKeyDeletedOnly,
};

class HoldingStore : public Store {
 public:
  // Holds `key` at `value` on this connection: the key exists while someone holds it. If this
  // connection closes, or (ttl > 0) does not hold it again within `ttl`, the hold lapses: the key
  // goes with its last holder and, where holdLapse() is kStoreNotifies, the store writes
  // `notifyValue` to `notifyKey` unless that key already exists, waking whoever waits on it.
  // Holding again renews (and may change the notify key). Returns the held value: `value` when
  // granted, otherwise the value someone else holds the key at (nothing changes then).
  virtual std::string hold(std::string_view key, std::string_view value,
                           std::chrono::milliseconds ttl, std::string_view notifyKey,
                           std::string_view notifyValue) = 0;
  // Gives up this connection's hold on `key` without notification. True if it held it.
  virtual bool release(std::string_view key) = 0;

  // Whether the store writes a lapsed hold's notice itself. A property of the backend, the same
  // for every connection to one store.
  virtual HoldLapse holdLapse() const = 0;

  // Blocks until at least one of `keys` is missing, and returns the missing ones in the order
  // given; returns nothing once `timeout` has passed with every key present. An empty `keys`
  // returns at once. The default form checks the keys every 50 ms (a store with no way to be told
  // of a deletion); HashStore is woken by the change itself, and an etcd watches the keys.
  virtual std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys,
                                                     Duration timeout);
};

}  // namespace ddprun::rendezvous
