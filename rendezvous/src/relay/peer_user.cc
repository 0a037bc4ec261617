#include "relay/peer_user.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ddprun::rendezvous {

namespace {

using boost::asio::ip::tcp;

// The errno of socket(AF_NETLINK, ..., NETLINK_SOCK_DIAG) on a kernel built without socket
// diagnostics (or without netlink): for good, unlike EMFILE or ENOMEM.
bool meansNoDiagnostics(int error) { return error == EPROTONOSUPPORT || error == EAFNOSUPPORT; }

PeerLookup failed(PeerLookup::Outcome outcome, int error) {
  PeerLookup lookup;
  lookup.outcome = outcome;
  lookup.error = error;
  return lookup;
}

void putAddress(std::uint32_t (&field)[4], const boost::asio::ip::address& address) {
  if (address.is_v6()) {
    const auto bytes = address.to_v6().to_bytes();
    std::memcpy(field, bytes.data(), bytes.size());
  } else {
    const auto bytes = address.to_v4().to_bytes();
    std::memcpy(field, bytes.data(), bytes.size());
  }
}

}  // namespace

std::string_view tcpStateName(TcpState state) {
  switch (state) {
    case TcpState::kEstablished:
      return "ESTABLISHED";
    case TcpState::kSynSent:
      return "SYN_SENT";
    case TcpState::kSynRecv:
      return "SYN_RECV";
    case TcpState::kFinWait1:
      return "FIN_WAIT1";
    case TcpState::kFinWait2:
      return "FIN_WAIT2";
    case TcpState::kTimeWait:
      return "TIME_WAIT";
    case TcpState::kClose:
      return "CLOSE";
    case TcpState::kCloseWait:
      return "CLOSE_WAIT";
    case TcpState::kLastAck:
      return "LAST_ACK";
    case TcpState::kListen:
      return "LISTEN";
    case TcpState::kClosing:
      return "CLOSING";
    case TcpState::kNewSynRecv:
      return "NEW_SYN_RECV";
  }
  return "an unknown state";
}

PeerAdmission admitPeer(const PeerLookup& lookup, uid_t agentUser) {
  switch (lookup.outcome) {
    case PeerLookup::Outcome::kFound:
      break;
    case PeerLookup::Outcome::kNoDiagnostics:
      // Nothing to decide on, and nothing will be: serving is what a relay without this check
      // did. The relay warns once, and docs/security.md says so.
      return {PeerVerdict::kAdmitUnchecked, std::nullopt};
    case PeerLookup::Outcome::kNoSuchSocket:
      return {PeerVerdict::kGone, std::nullopt};
    case PeerLookup::Outcome::kFailed:
      // Out of descriptors or memory, which another user may cause on purpose: fail closed (the
      // worker's client reconnects).
      return {PeerVerdict::kLookupFailed, std::nullopt};
  }
  const PeerSocket& socket = lookup.socket;
  // No inode: no process holds the socket any more. A TIME_WAIT or FIN_WAIT2 mini-socket (the
  // peer closed it while the connection waited in the accept queue), or an orphan: its uid is 0
  // or stale, not its sender's, and nobody is left to read a reply. Its queued bytes are not
  // served (issue #18: they were, under the job's token, as root's).
  if (socket.inode == 0) return {PeerVerdict::kGone, std::nullopt};
  // Held by a process, so `uid` is real: the fsuid of the process that made the socket, which no
  // other user can choose. Live states of a connecting socket at accept time: ESTABLISHED, or a
  // client that sent its request and shut down its sending side (shutdown(SHUT_WR)) but still
  // holds the socket to read the reply: FIN_WAIT1 until its FIN is acknowledged, then FIN_WAIT2.
  // Any other state (CLOSE after a reset, CLOSE_WAIT, a LISTEN socket now on the peer's port)
  // means the connection that queued these bytes is over.
  switch (socket.state) {
    case TcpState::kEstablished:
    case TcpState::kFinWait1:
    case TcpState::kFinWait2:
      break;
    default:
      return {PeerVerdict::kGone, socket.uid};
  }
  // Only the agent's own user, root included only when root is the agent's user. Admitting root
  // besides would gain nothing (root can read the token file, or run as the agent's user), and
  // would trust a uid that is not always a person's: uid 0 is what the kernel reports for
  // mini-sockets (issue #18), and root-run services that connect where a user asks them to (a
  // proxy, a port forwarder) would carry that user's bytes in as root's.
  if (socket.uid != agentUser) return {PeerVerdict::kOtherUser, socket.uid};
  return {PeerVerdict::kAdmit, socket.uid};
}

PeerSocketTable::PeerSocketTable(tcp::endpoint listener) : listener_(std::move(listener)) {}

PeerSocketTable::~PeerSocketTable() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<PeerLookup> PeerSocketTable::ready() {
  if (noDiagnostics_) return noDiagnostics_;
  if (fd_ < 0) {
    fd_ = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd_ < 0) {
      const int error = errno;
      if (meansNoDiagnostics(error)) {
        noDiagnostics_ = failed(PeerLookup::Outcome::kNoDiagnostics, error);
        return noDiagnostics_;
      }
      return failed(PeerLookup::Outcome::kFailed, error);
    }
    // The kernel answers within the request's own sendto; the timeout only bounds a surprise.
    timeval timeout{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  if (!checked_) {
    // The listener surely exists: "no such socket" for it means the kernel has no TCP socket
    // diagnostics (no inet_diag or tcp_diag for the family), which it reports as ENOENT too.
    const PeerLookup own = query(listener_, tcp::endpoint(listener_.protocol(), 0));
    switch (own.outcome) {
      case PeerLookup::Outcome::kFound:
        checked_ = true;
        break;
      case PeerLookup::Outcome::kNoSuchSocket:
        noDiagnostics_ = failed(PeerLookup::Outcome::kNoDiagnostics, ENOENT);
        return noDiagnostics_;
      case PeerLookup::Outcome::kNoDiagnostics:
      case PeerLookup::Outcome::kFailed:
        return own;
    }
  }
  return std::nullopt;
}

PeerLookup PeerSocketTable::connectingSocket(const tcp::endpoint& local,
                                             const tcp::endpoint& peer) {
  if (auto cannot = ready()) return *cannot;
  // The connecting socket: its source is the peer, its destination the relay.
  return query(peer, local);
}

PeerLookup PeerSocketTable::query(const tcp::endpoint& source, const tcp::endpoint& destination) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;  // one exact socket, not a dump
  message.header.nlmsg_seq = ++sequence_;
  inet_diag_req_v2& request = message.request;
  request.sdiag_family = source.address().is_v6() ? AF_INET6 : AF_INET;
  request.sdiag_protocol = IPPROTO_TCP;
  request.idiag_states = ~0U;
  request.id.idiag_sport = htons(source.port());
  request.id.idiag_dport = htons(destination.port());
  putAddress(request.id.idiag_src, source.address());
  putAddress(request.id.idiag_dst, destination.address());
  request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd_, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return failed(PeerLookup::Outcome::kFailed, errno);
  }
  // One message answers: the socket, or an error. A reply to an earlier request whose receive
  // failed may come first; it is skipped by its sequence number (a few at most).
  alignas(nlmsghdr) char reply[8192];
  for (int attempt = 0; attempt < 4; ++attempt) {
    const ssize_t got = ::recv(fd_, reply, sizeof reply, 0);
    if (got < 0) return failed(PeerLookup::Outcome::kFailed, errno);
    const auto size = static_cast<std::size_t>(got);
    // The netlink macros cast the C way; walk the messages by hand instead.
    for (std::size_t offset = 0; offset + sizeof(nlmsghdr) <= size;) {
      nlmsghdr header;
      std::memcpy(&header, reply + offset, sizeof header);
      if (header.nlmsg_len < sizeof(nlmsghdr) || offset + header.nlmsg_len > size) break;
      const char* payload = reply + offset + NLMSG_ALIGN(sizeof(nlmsghdr));
      const std::size_t payloadSize = header.nlmsg_len - NLMSG_ALIGN(sizeof(nlmsghdr));
      offset += NLMSG_ALIGN(header.nlmsg_len);
      if (header.nlmsg_seq != sequence_) continue;
      if (header.nlmsg_type == NLMSG_ERROR && payloadSize >= sizeof(nlmsgerr)) {
        nlmsgerr error;
        std::memcpy(&error, payload, sizeof error);
        if (error.error == 0) continue;  // an acknowledgement, not an answer
        if (error.error == -ENOENT) return failed(PeerLookup::Outcome::kNoSuchSocket, ENOENT);
        return failed(PeerLookup::Outcome::kFailed, -error.error);
      }
      if (header.nlmsg_type == SOCK_DIAG_BY_FAMILY && payloadSize >= sizeof(inet_diag_msg)) {
        inet_diag_msg found;
        std::memcpy(&found, payload, sizeof found);
        // An exact lookup that finds no connection falls back to a listener on the address
        // (another socket, on the peer's port now): only the very socket asked for answers.
        if (found.id.idiag_sport != request.id.idiag_sport ||
            found.id.idiag_dport != request.id.idiag_dport) {
          return failed(PeerLookup::Outcome::kNoSuchSocket, ENOENT);
        }
        PeerLookup lookup;
        lookup.outcome = PeerLookup::Outcome::kFound;
        lookup.socket.state = static_cast<TcpState>(found.idiag_state);
        lookup.socket.inode = found.idiag_inode;
        lookup.socket.uid = found.idiag_uid;
        return lookup;
      }
    }
  }
  return failed(PeerLookup::Outcome::kFailed, EPROTO);
}

}  // namespace ddprun::rendezvous
