// Whether the workers' relay may serve a connection, from what the kernel says of the socket that
// opened it. TCP has no SO_PEERCRED, but the kernel's socket table knows each socket's state,
// inode and owner, and sock_diag (netlink) looks one socket up exactly, however many the host has.
//
// The owner alone is not enough (issue #18): a connection that waits in the accept queue while its
// peer closes is accepted with its bytes still queued, and by then the peer's socket is a
// TIME_WAIT or FIN_WAIT2 mini-socket, which the kernel reports with uid 0 and inode 0. So the
// decision (admitPeer) takes the whole answer: only a live socket, held by a process (an inode),
// of the agent's user is served.
#pragma once

#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ddprun::rendezvous {

// A TCP socket's state as the kernel numbers it (include/net/tcp_states.h), as sock_diag reports.
enum class TcpState : std::uint8_t {
  kEstablished = 1,
  kSynSent,
  kSynRecv,
  kFinWait1,
  kFinWait2,
  kTimeWait,
  kClose,
  kCloseWait,
  kLastAck,
  kListen,
  kClosing,
  kNewSynRecv,
};

// The kernel's name of a state ("TIME_WAIT"), for log lines.
std::string_view tcpStateName(TcpState state);

// What the kernel's socket table says of one socket.
struct PeerSocket {
  TcpState state = TcpState::kClose;
  // The socket's inode: 0 when no process holds it (a TIME_WAIT or FIN_WAIT2 mini-socket, a
  // socket closed and orphaned), and then `uid` means nothing (mini-sockets report 0).
  std::uint64_t inode = 0;
  uid_t uid = 0;
};

// The kernel's answer to one lookup.
struct PeerLookup {
  enum class Outcome : std::uint8_t {
    kFound,          // `socket` holds the answer
    kNoSuchSocket,   // the kernel knows no such socket (ENOENT): the peer is gone
    kNoDiagnostics,  // this kernel has no socket diagnostics at all; `error`: the errno that says
                     // so
    kFailed,         // the lookup failed otherwise (`error`: out of descriptors or memory, ...)
  };
  Outcome outcome = Outcome::kFailed;
  PeerSocket socket{};
  int error = 0;
};

// The relay's decision on one accepted connection.
enum class PeerVerdict : std::uint8_t {
  kAdmit,           // a live socket of the agent's user
  kAdmitUnchecked,  // the kernel cannot tell (no socket diagnostics): served, with a warning
  kOtherUser,       // a live socket of another user
  kGone,            // the peer's socket is gone or closing: nothing to serve
  kLookupFailed,    // the kernel could not be asked this time: refused, fail closed
};

struct PeerAdmission {
  PeerVerdict verdict = PeerVerdict::kLookupFailed;
  // The owner, where the answer names a real one (a socket some process holds): for the log.
  std::optional<uid_t> owner;
};

// The decision, from the lookup alone (pure: unit-tested on every answer). `agentUser`: the
// agent's effective uid. Root is admitted only when it is the agent's user: see the .cc.
PeerAdmission admitPeer(const PeerLookup& lookup, uid_t agentUser);

// One netlink socket for the relay's life (opened on first use, not per connection), so that a
// lookup costs two system calls: the request and its reply, which the kernel queues before the
// request's sendto returns.
class PeerSocketTable {
 public:
  // `listener`: the relay's own listening socket. Looked up once, it tells a kernel without TCP
  // socket diagnostics (ENOENT for a socket that surely exists) from a peer that is gone (ENOENT
  // for the peer's socket), which the kernel answers alike.
  explicit PeerSocketTable(boost::asio::ip::tcp::endpoint listener);
  ~PeerSocketTable();
  PeerSocketTable(const PeerSocketTable&) = delete;
  PeerSocketTable& operator=(const PeerSocketTable&) = delete;

  // The socket that opened the connection accepted on `local` from `peer` (both on this host).
  PeerLookup connectingSocket(const boost::asio::ip::tcp::endpoint& local,
                              const boost::asio::ip::tcp::endpoint& peer);

 private:
  // Opens the netlink socket and checks the kernel on the listener, once; nothing when ready,
  // else the answer every lookup gives (no diagnostics), or this one (a failure to retry).
  std::optional<PeerLookup> ready();
  PeerLookup query(const boost::asio::ip::tcp::endpoint& source,
                   const boost::asio::ip::tcp::endpoint& destination);

  boost::asio::ip::tcp::endpoint listener_;
  int fd_ = -1;
  bool checked_ = false;                     // the listener was found: the kernel can tell
  std::optional<PeerLookup> noDiagnostics_;  // the kernel cannot tell, for good
  std::uint32_t sequence_ = 0;
};

}  // namespace ddprun::rendezvous
