// HoldingStore: a Store whose connection can keep keys alive, the liveness operations the agents'
// rendezvous is built on. A node holds its "alive" key; when its connection closes or it stops
// renewing, the store itself writes the node's notice into a key the others wait on, so a lost
// node announces itself without anyone polling.
//
// Implementations: TcpStore (ddprun's server: the HOLD/RELEASE extension ops) and HashStore (the
// in-process store, whose connect() gives each user a connection of its own). Another rendezvous
// backend (etcd: leases and transactions) implements the same two calls.
//
// Thread safety: as Store.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

class HoldingStore : public Store {
 public:
  // Holds `key` at `value` on this connection: the key exists while someone holds it. If this
  // connection closes, or (ttl > 0) does not hold it again within `ttl`, the store writes
  // `notifyValue` to `notifyKey` unless that key already exists, waking whoever waits on it.
  // Holding again renews (and may change the notify key). Returns the held value: `value` when
  // granted, otherwise the value someone else holds the key at (nothing changes then).
  virtual std::string hold(std::string_view key, std::string_view value,
                           std::chrono::milliseconds ttl, std::string_view notifyKey,
                           std::string_view notifyValue) = 0;
  // Gives up this connection's hold on `key` without notification. True if it held it.
  virtual bool release(std::string_view key) = 0;
};

}  // namespace ddprun::rendezvous
