// LoopbackRelay: how unmodified PyTorch workers reach a store that wants a token. Their TCPStore
// client cannot prove a token, so each agent serves its own workers on 127.0.0.1 (their
// MASTER_ADDR:MASTER_PORT) and carries every connection to the job's store over a connection of
// its own that has proved the token (auth/handshake.h), over TLS when the job has it.
//
// One upstream connection per worker connection, and bytes relayed unchanged: the store sees each
// worker as its own client, so its per-connection state (the dialect, parked WAITs and their
// CANCEL_WAIT, torch 1.13's cancel-by-next-request, WATCH_KEY, HOLDs) and the client's own timeouts
// keep their exact meaning, and the relay parses nothing a worker sends. docs/security.md says
// why this beats one multiplexed connection.
//
// Only live processes of the agent's own user are served: the relay proves the token for whoever
// connects, so another user's connection on a shared node is closed at once, and so is one whose
// peer has already closed (the kernel names each socket's state, inode and owner:
// relay/peer_user.h). Refusals are logged per user and reason, then counted (refusal_tally.h).
//
// With a handoff path, the relay also listens on a Unix socket there, for the workers that run
// with its shim (relay_handoff_wire.h): to one of those it gives the proven store connection
// itself, and their requests then go to the store without the relay's hop. The same users are
// served there as on the port (SO_PEERCRED names the peer). Not with TLS, whose session cannot
// leave this process.
//
// A connection is accepted at once; its bytes wait in the kernel until the upstream connection has
// passed the handshake. If that fails, the worker's connection is closed (its client reports a
// broken store connection); a store that holds a different token is logged once per upstream.
//
// Thread safety: one serving thread of its own; setUpstream() and stats() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/tls.h"

namespace ddprun::rendezvous {

struct RelayOptions {
  JobSecret secret;
  // Reaching the upstream store and passing the handshake, per connection.
  std::chrono::milliseconds connectTimeout = std::chrono::seconds(30);
  // With TLS, every upstream connection is a TLS one that checks the store's certificate.
  std::shared_ptr<const TlsConfig> tls = nullptr;
  // Where to listen for handoffs: a path in a directory only the agent's user can enter (the
  // agent's private directory); empty for none. Ignored with TLS.
  std::string handoffPath = {};
};

class LoopbackRelay {
 public:
  struct Stats {
    std::size_t connections = 0;  // relayed now
    std::uint64_t accepted = 0;   // since start
    std::uint64_t upstreamFailures =
        0;                           // worker connections closed because the store was not reached
    std::uint64_t refusedUsers = 0;  // connections from another local user, closed at once
    std::uint64_t refusedGone = 0;   // connections whose peer had closed before they were served
    std::uint64_t refusedLookups = 0;  // closed because the kernel could not be asked (fail closed)
    std::uint64_t handedOff = 0;       // proven store connections given to workers, since start
  };

  // Listens on 127.0.0.1 (a free port), and at the handoff path if asked, and starts serving.
  // Throws std::runtime_error when it cannot listen on the port.
  explicit LoopbackRelay(RelayOptions options);
  // Closes every connection and stops the serving thread.
  ~LoopbackRelay();
  LoopbackRelay(const LoopbackRelay&) = delete;
  LoopbackRelay& operator=(const LoopbackRelay&) = delete;

  std::uint16_t port() const;
  // DDPRUN_RELAY_HANDOFF's value for the workers that run with the shim, "<port>:<path>"
  // (relay_handoff_wire.h); empty when the relay takes no handoffs (none was asked for, TLS, or
  // the socket could not be made: then a warning says why, and the port serves every worker).
  std::string handoffVariable() const;
  // Where connections accepted from now on are carried (connections already relayed keep theirs).
  void setUpstream(const std::string& host, std::uint16_t port);
  Stats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
