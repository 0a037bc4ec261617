// TcpStore: a Store client of a c10d TCPStore server: ddprun-rendezvous, a ddprun agent, or
// torch's own server (torch 2.x with the kTorch2 dialect, torch 1.13 with kTorch113).
//
// One TCP connection (TCP_NODELAY) per object. Connecting retries with exponential backoff and
// jitter until options.connectTimeout; with a token, a connection first passes the token
// handshake (StoreAuthError at once when the store holds another token); in the 2.x dialect it is
// accepted only after the VALIDATE + PING handshake. When something answers that fails the
// handshake, connecting stops and names it (StoreHandshakeError::peer(): an HTTP or SSH server,
// silence, a peer that hangs up; or a StoreAuthError for a ddprun store of other settings), after
// asking a peer that closed the handshake the other openings
// (rendezvous/src/client/store_handshake.h). Keys go on the wire with options.keyPrefix ("/" like
// torch's client), so `set("k")` here and `store.set("k")` in a PyTorch worker name the same key.
//
// get() and multiGet() are WAIT then GET, as in torch; a key deleted between the two is waited for
// again, never returned as "" (1.13 reads with a compareSet that changes nothing, since its
// server closes the connection on a GET of a missing key). When a wait times out, the 2.x dialect
// sends CANCEL_WAIT and keeps the connection; the 1.13 dialect has no cancel, so the connection
// is dropped (a late STOP_WAITING would otherwise be read as the next reply) and the next call
// reconnects. A connection that breaks mid-call raises StoreConnectionError and is reopened by
// the next call; the failed call is never retried behind the caller's back.
//
// Thread-safe: calls are serialised on the connection by a mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ddprun/rendezvous/holding_store.h"
#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/tls.h"
#include "ddprun/rendezvous/wire_dialect.h"

namespace ddprun::rendezvous {

namespace detail {
class ClientSocket;
}  // namespace detail

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // name or address; IPv6 literals without brackets
  std::uint16_t port = 29500;
  WireDialect dialect = WireDialect::kTorch2;
  // Timeout of get(), wait() and multiGet(), and the bound on any single reply (default 300 s).
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  // How long to keep trying to connect (and handshake) before giving up.
  std::chrono::milliseconds connectTimeout = std::chrono::seconds(60);
  // Retry delays: the first, the cap, the growth factor, and +/- this fraction of random jitter.
  std::chrono::milliseconds initialBackoff = std::chrono::milliseconds(10);
  std::chrono::milliseconds maxBackoff = std::chrono::seconds(1);
  double backoffFactor = 1.6;
  double backoffJitter = 0.5;
  // Put in front of every key on the wire; listKeys() shows only keys that carry it.
  std::string keyPrefix = "/";
  // The largest value blob accepted in a reply (protects the client from a bogus length).
  std::size_t maxReplyValueBytes = std::size_t{1} << 30;
  // The job's token: every connection first proves it holds it (auth/handshake.h), and checks
  // that the store holds it too. Needed by a store that has one; refused by one that has none.
  std::optional<JobSecret> secret;
  // TLS (needs `secret`): the connection is encrypted and the store's certificate checked before
  // the token handshake. The process must ignore SIGPIPE (ddprun does), as OpenSSL writes with
  // write(2); only the TLS handshake blocks it itself (a peer that is no store hangs up there).
  std::shared_ptr<const TlsConfig> tls;
};

class TcpStore final : public HoldingStore {
 public:
  // Connects now. Throws StoreConnectionError naming host:port, the attempts and the last error.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  const TcpStoreOptions& options() const { return options_; }

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  std::optional<std::string> tryGet(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(std::string_view key) override;
  std::int64_t numKeys() override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::string>& values) override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> listKeys() override;

  // --- ddprun extensions that only ddprun's own server (daemon or agent) has: LIST_PREFIX,
  // DELETE_PREFIX, HOLD, RELEASE (docs/protocol.md). Throw StoreUnsupportedError in the 1.13
  // dialect; a torch server closes the connection.
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override;
  // Asks again while the server says keys remain (it deletes a batch per request).
  std::int64_t deletePrefix(std::string_view prefix) override;
  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override;
  bool release(std::string_view key) override;
  // ddprun's server writes a lapsed hold's notice itself.
  HoldLapse holdLapse() const override { return HoldLapse::kStoreNotifies; }

 private:
  using Clock = std::chrono::steady_clock;

  // Runs `body` on a connected socket under the mutex, reconnecting first if needed. An I/O
  // failure drops the connection and becomes StoreConnectionError naming `what`, `keys` (as
  // quoted() formats them) and how long the call had run.
  template <typename Keys, typename Body>
  auto call(std::string_view what, const Keys& keys, Body&& body);
  // `context` ("get 'k': ") goes in front of the reason when connecting fails.
  void connect(std::string_view context);
  // The token handshake on a fresh connection. Throws StoreAuthError when the store holds another
  // token, SocketError when it does not answer as a token-holding store.
  void proveToken(detail::ClientSocket& socket, Clock::time_point deadline);
  // WAIT for `keys` until `deadline`, cancelling on expiry;
  // `timeout` is what the StoreTimeoutError reports.
  void finishWait(const std::vector<std::string>& keys, Clock::time_point deadline,
                  Duration timeout);
  // get() on the locked connection: waits until `deadline` for `key` to be there when it is read.
  std::string getLocked(detail::ClientSocket& socket, std::string_view key,
                        Clock::time_point deadline);
  // compareSet() on the locked connection.
  std::string compareSetLocked(detail::ClientSocket& socket, std::string_view key,
                               std::string_view expected, std::string_view desired);
  // The value of `key`, or nothing if it is missing, read atomically without ever costing the
  // connection (unlike a GET, which cannot tell "" from missing in 2.x and closes it in 1.13).
  std::optional<std::string> readLocked(detail::ClientSocket& socket, std::string_view key);
  [[noreturn]] void throwUnsupported(std::string_view what) const;
  std::string where() const;

  TcpStoreOptions options_;
  std::mutex mutex_;
  std::unique_ptr<detail::ClientSocket> socket_;
  std::string request_;  // reused request buffer
};

}  // namespace ddprun::rendezvous
