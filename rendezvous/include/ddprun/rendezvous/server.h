// RendezvousServer: the TCP key-value store server, wire-compatible with PyTorch's c10d TCPStore.
//
// It serves torch 1.13 and torch 2.x clients on the same port, deciding the dialect per connection
// from its first bytes, and it is built so that no client can hurt another: requests are decoded
// incrementally without blocking, every length is checked before anything is allocated, a peer
// that stalls mid-request or stops reading is dropped, and a malformed frame closes only the
// connection that sent it. It binds only the address it is given (127.0.0.1 by default), where
// torch's server listens on every interface.
//
// One event-loop thread (Boost.Asio) serves every connection; the data needs no locks.
// The ddprun-rendezvous daemon wraps this class; the ddprun agent embeds it.
//
// Thread safety: stop() and stats() may be called from any thread; the rest from one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/limits.h"
#include "ddprun/rendezvous/tls.h"

namespace ddprun::rendezvous {

struct ServerOptions {
  // The one address to listen on (a name is resolved; its first address is used).
  std::string host = "127.0.0.1";
  // 0 picks a free port; port() tells which.
  std::uint16_t port = 29500;
  // Connections beyond this are accepted and closed at once, with a warning.
  std::size_t maxConnections = 16384;
  ProtocolLimits limits;
  // A connection that sent part of a request and then nothing for this long is closed
  // (a client never pauses inside a request; a stalled half-frame is a broken or hostile peer).
  std::chrono::milliseconds partialRequestTimeout = std::chrono::seconds(30);
  // A connection whose replies make no progress for this long (the peer stopped reading) is closed.
  // Progress is any byte taken by the kernel: a slow but steady reader of a large reply stays.
  std::chrono::milliseconds writeStallTimeout = std::chrono::seconds(60);
  // Reading from a connection pauses while this many reply bytes wait for it to read them. A
  // MULTI_GET whose reply alone is larger, and a WATCH_KEY watcher this far behind, are closed.
  std::size_t maxPendingReplyBytes = 64 * 1024 * 1024;
  // The same, summed over every connection. A connection whose next reply would take the total
  // over it takes no new request until the total falls. Connections with replies waiting fill
  // only three quarters of it: the rest is kept for those whose peers have read everything, and
  // these always get small replies (64 KiB), so clients that read are served while others sit
  // on theirs. 256 MiB: clients that read hold a few KiB each, and this still lets several
  // 64 MiB replies stream at once; 8 clients that never read no longer hold 8 x 64 MiB.
  // It counts what replies hold beyond the stored data (Stats::pendingReplyBytes): a large stored
  // value is sent by reference, so thousands of clients reading one value cost it once, and
  // within maxStoredBytes; maxPendingReplyBytes still counts it in full for each connection.
  std::size_t maxTotalPendingReplyBytes = 256 * 1024 * 1024;
  // The data the store holds: keys, values, queue items and holds, each with its bookkeeping
  // (KvState::storedBytes). A write that would take it over is refused by closing the writer's
  // connection with a warning (TCPStore has no error reply); the data never exceeds it.
  // 512 MiB: hundreds of times what a 10,000-rank job stores (a few KiB per rank: addresses,
  // NCCL ids, counters), yet far below a training host's memory, which one runaway client must
  // not be able to take.
  std::size_t maxStoredBytes = 512 * 1024 * 1024;
  // TCP keep-alive on every connection: a peer whose host vanished (half-open connection) is
  // dropped after idle + interval * probes. Idle connections of live peers are never closed:
  // PyTorch workers hold theirs silently for the whole training run. keepAliveIdle = 0 disables.
  std::chrono::seconds keepAliveIdle = std::chrono::seconds(30);
  std::chrono::seconds keepAliveInterval = std::chrono::seconds(5);
  int keepAliveProbes = 4;
  // The job's token. With one, every connection must prove it holds the same token before any
  // store operation (auth/handshake.h); one that does not is closed without a reply. Without
  // one, anyone who reaches the port may use the store, as with torch's TCPStore.
  std::optional<JobSecret> secret;
  // With a secret: a connection that has not finished the handshake this long after it was
  // accepted is closed (a job's client needs one round trip; an idle stranger holds a descriptor).
  std::chrono::milliseconds handshakeTimeout = std::chrono::seconds(10);
  // With a secret: connections still in the handshake at most; a new one beyond this closes the
  // oldest, so a flood of idle connections cannot keep the job's own clients out.
  std::size_t maxPendingHandshakes = 1024;
  // TLS (needs a secret and TlsConfig::canServe(), else the constructor throws ServerError:
  // loadJobSecurity() gives both): every connection is a TLS one, then proves the token inside it.
  // The handshake deadline and the pending limit cover both handshakes.
  std::shared_ptr<const TlsConfig> tls;
};

// Listening failed: the message is one line naming the address, the reason and the fix.
class ServerError : public std::runtime_error {
 public:
  // What went wrong, for callers that decide on it (the agent becomes a client when the address
  // is taken or is another host's); the message is for people.
  enum class Code {
    kOther,
    kAddressInUse,         // something listens on the address already
    kAddressNotAvailable,  // no interface of this host has the address
    kUnresolvedHost,       // the host name does not resolve (yet: a late DNS name)
  };
  explicit ServerError(const std::string& message, Code code = Code::kOther)
      : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

class RendezvousServer {
 public:
  struct Stats {
    std::size_t connections = 0;          // open now
    std::uint64_t accepted = 0;           // since start
    std::uint64_t refused = 0;            // over maxConnections
    std::uint64_t protocolErrors = 0;     // connections closed for a bad frame or a stall
    std::uint64_t refusedHandshakes = 0;  // connections closed for failing the token handshake
    std::size_t storedBytes = 0;          // the data held now, as maxStoredBytes counts it
    // What unsent replies hold beyond the stored data, all connections (what
    // maxTotalPendingReplyBytes bounds): the bytes they own, and the values overwritten or erased
    // while they referenced them. A stored value they send costs nothing here.
    std::size_t pendingReplyBytes = 0;
    std::size_t keys = 0;  // keys held now (numKeys)
    // Requests served since start, per op, by the op's protocol name ("SET", "WAIT", ...): every
    // op, those never asked for with 0.
    std::vector<std::pair<std::string_view, std::uint64_t>> operations;
  };

  // Binds and listens now, so port() is known and a bad address fails here. Throws ServerError.
  explicit RendezvousServer(ServerOptions options);
  // Stops and waits for the serving thread.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  std::uint16_t port() const;
  // "host:port" as bound, e.g. "127.0.0.1:29500" or "[::1]:29500".
  std::string address() const;

  // Serves on the calling thread until stop().
  void run();
  // Serves on a new background thread.
  void start();
  // Closes the listener and every connection, and ends run(). Idempotent; waits for the
  // background thread when start() was used and the caller is not that thread.
  void stop();

  Stats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
