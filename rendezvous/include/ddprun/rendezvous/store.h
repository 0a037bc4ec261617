// Store: the key-value contract every ddprun component rendezvouses through.
//
// The agent keeps job membership in a Store, the worker runtime publishes its NCCL id and Gloo
// addresses in one, and PyTorch workers reach the same data through the c10d TCPStore protocol.
// The semantics are c10d's, so a key written by a PyTorch worker means the same thing here.
//
// Keys and values are arbitrary bytes (std::string is used as a byte container; embedded NULs are
// fine). Implementations: HashStore (in-process), TcpStore (client of ddprun-rendezvous or of
// torch's own TCPStore server), PrefixStore (namespacing decorator).
//
// Thread safety: every implementation may be called from several threads at once; a blocking
// call in one thread may delay other threads' calls on the same object (TcpStore serialises calls
// on its one connection), never other objects.
//
// Errors: every failure throws a StoreError subclass (errors.h). A StoreTimeoutError leaves the
// store usable; a StoreConnectionError means the operation's outcome is unknown.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/errors.h"

namespace ddprun::rendezvous {

// What a prefix listing returns (Store::listPrefix).
struct ListedKeys {
  std::vector<std::string> keys;  // in byte order (memcmp), as visible through the store
  bool more = false;              // further keys match: the listing stopped at its limit
};

class Store {
 public:
  using Duration = std::chrono::milliseconds;
  // The default timeout of blocking calls, as in c10d.
  static constexpr Duration kDefaultTimeout = std::chrono::seconds(300);

  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores `value` under `key`, overwriting any previous value. Wakes every waiter on `key`.
  virtual void set(std::string_view key, std::string_view value) = 0;

  // Returns the value of `key`, blocking until the key exists.
  // Throws StoreTimeoutError if it does not exist within timeout(); a missing key is never
  // reported as an empty value.
  virtual std::string get(std::string_view key) = 0;

  // The value of `key` if it exists at the moment of the call, else nothing: never blocks, and a
  // missing key is never reported as an empty value (a present "" is returned as ""). For a key
  // that may or may not be there (a round's close record, the job's current round): check() then
  // get() is two requests (TcpStore's get() is three: CHECK, then WAIT and GET) and not atomic,
  // where a key deleted between them leaves get() blocking for its whole timeout.
  // The default is exactly that check() + get() (for a backend with no atomic form). TcpStore
  // reads with one compareSet whose expected value nobody stores (one round trip when the key
  // exists; two when it is missing or holds the first probe value), HashStore under its lock,
  // EtcdStore with one range read. A wrapper store must forward it, or the backend's form is
  // lost behind it (as with takeTicket). On ddprun's store the answer is a compareSet's, a copy
  // of the value in each reply, where a GET of a large value references the stored one: a
  // large value that many clients read at once is read with get().
  virtual std::optional<std::string> tryGet(std::string_view key);

  // Adds `delta` to the integer stored under `key` (missing = 0) and returns the new value.
  // The value is stored as ASCII decimal, so get() of a counter returns e.g. "12". An existing
  // value is parsed like strtoll (leading whitespace, sign, trailing junk ignored); overflow wraps.
  // Throws StoreError if the existing value is not a number (TcpStore: the server closes the
  // connection, which surfaces as StoreConnectionError).
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;

  // Tickets: a dense, unique sequence number drawn from `key`. The k-th takeTicket() of a key
  // returns k (1, 2, 3, ...; each number to one caller, none skipped: see below), and
  // ticketCount() how many were taken (0 for a missing key). A ticket key is touched by these two
  // calls only: its stored value is the backend's own business (a decimal count by default, empty
  // on etcd, which keeps a marker key per take beside it), not a counter that get() or add() may
  // read. A deleted key starts again at 1. Where the backend cannot say whether a take it sent
  // was applied it throws StoreConnectionError, and a number may then have been taken for nobody
  // (the caller treats the error as a lost store, as with add()).
  // The default is add(key, 1) / add(key, 0) (c10d's counter; the key is created at 0 by a count,
  // as c10d does). A backend where concurrent increments race overrides both: EtcdStore takes a
  // ticket in one etcd write that never fails (a put's version), where add() is a guarded
  // read-modify-write that every concurrent adder but one loses and retries. A wrapper store must
  // forward both, or the backend's form is lost behind it.
  virtual std::int64_t takeTicket(std::string_view key) { return add(key, 1); }
  virtual std::int64_t ticketCount(std::string_view key) { return add(key, 0); }

  // Atomically: if `key` holds `expected`, replace it with `desired` and return `desired`;
  // if it holds something else, return that. A missing key is created with `desired` only when
  // `expected` is empty (and `desired` is returned); otherwise it stays missing and `expected` is
  // returned, exactly as c10d does.
  virtual std::string compareSet(std::string_view key, std::string_view expected,
                                 std::string_view desired) = 0;

  // Blocks until every key in `keys` exists. A key that is created and deleted again while others
  // are still missing counts as having appeared. Throws StoreTimeoutError after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // True if every key in `keys` exists right now (true for an empty list). Never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Removes `key`; true if it existed.
  virtual bool deleteKey(std::string_view key) = 0;

  // The number of keys in the whole underlying store, every namespace included (a PrefixStore
  // does not narrow it, as in c10d; a TcpStore counts keys of every client, torch's "init/" too).
  virtual std::int64_t numKeys() = 0;

  // get() of each key, after waiting (timeout()) for all of them.
  virtual std::vector<std::string> multiGet(const std::vector<std::string>& keys);

  // set() of each pair. REQUIRES: keys.size() == values.size() (else StoreError).
  virtual void multiSet(const std::vector<std::string>& keys,
                        const std::vector<std::string>& values);

  // Appends `value` to the bytes under `key`, creating it if missing. Wakes waiters on `key`.
  virtual void append(std::string_view key, std::string_view value);

  // The keys visible through this store: in a PrefixStore, those under its prefix with the prefix
  // removed. Throws StoreUnsupportedError where the backend cannot list (torch 1.13's protocol).
  // Unbounded: it names every key of the store; a store that others share is listed with
  // listPrefix() instead.
  virtual std::vector<std::string> listKeys();

  // A listing is bounded so that one call cannot return the whole keyspace of a store that many
  // jobs share (an etcd): at most this many names, and at most this many bytes of names (the
  // first name always fits: keys are at most 8 KiB). The same figures as one slice of ddprun's
  // LIST_KEYS reply, so the server builds a reply in one event-loop turn.
  static constexpr std::size_t kMaxListedKeys = 4096;
  static constexpr std::size_t kMaxListedBytes = std::size_t{1} << 20;

  // The keys visible through this store whose names start with `prefix` ("" = all), in byte
  // order: the first min(maxKeys, kMaxListedKeys) of them within kMaxListedBytes, `more` set when
  // others match too (maxKeys 0 asks only whether any key matches). Keys only, never queues. One
  // moment's keys where the store lists natively (HashStore, ddprun's server: an ordered index,
  // so the cost is that of the names returned, not of the store's size). The default form filters
  // listKeys() (the whole store) and throws StoreUnsupportedError where that does.
  virtual ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys);

  // Deletes every key visible through this store whose name starts with `prefix` ("" = every
  // key this store sees: a PrefixStore's own, a TcpStore's under its key prefix) and returns how
  // many it deleted. As deleteKey: waiters are not woken, a held key goes like any other.
  // ddprun's server deletes at most kMaxListedKeys per request, serving other clients in between,
  // so a large prefix is not atomic: a key a concurrent writer creates under it meanwhile may
  // stay. The default form is listPrefix() and deleteKey() a page at a time.
  virtual std::int64_t deletePrefix(std::string_view prefix);

  // Blocks until `worldSize` callers have entered the barrier named `key`, then returns in every
  // one of them. Each key serves one barrier (use a fresh key, e.g. with a round number, per use).
  // Throws StoreTimeoutError after `timeout`.
  virtual void barrier(std::string_view key, std::int64_t worldSize, Duration timeout);

  // The timeout of get(), wait() without one and multiGet().
  Duration timeout() const { return timeout_; }
  virtual void setTimeout(Duration timeout) { timeout_ = timeout; }

 protected:
  Store() = default;

 private:
  Duration timeout_ = kDefaultTimeout;
};

}  // namespace ddprun::rendezvous
