#include "relay/peer_user.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace ddprun::rendezvous {

std::optional<uid_t> localPeerUser(const boost::asio::ip::tcp::endpoint& local,
                                   const boost::asio::ip::tcp::endpoint& peer) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Five seconds at most: the kernel answers at once, but nothing here may block the relay for long.
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);

  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;  // one exact socket, not a dump
  inet_diag_req_v2& request = message.request;
  request.sdiag_family = peer.address().is_v6() ? AF_INET6 : AF_INET;
  request.sdiag_protocol = IPPROTO_TCP;
  request.idiag_states = ~0U;
  // The connecting socket: its source is the peer, its destination the relay.
  request.id.idiag_sport = htons(peer.port());
  request.id.idiag_dport = htons(local.port());
  if (peer.address().is_v6()) {
    const auto source = peer.address().to_v6().to_bytes();
    const auto destination = local.address().to_v6().to_bytes();
    std::memcpy(request.id.idiag_src, source.data(), source.size());
    std::memcpy(request.id.idiag_dst, destination.data(), destination.size());
  } else {
    const auto source = peer.address().to_v4().to_bytes();
    const auto destination = local.address().to_v4().to_bytes();
    std::memcpy(request.id.idiag_src, source.data(), source.size());
    std::memcpy(request.id.idiag_dst, destination.data(), destination.size());
  }
  request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    return std::nullopt;
  }
  alignas(nlmsghdr) char reply[8192];
  const ssize_t got = ::recv(fd, reply, sizeof reply, 0);
  if (got <= 0) return std::nullopt;
  // The netlink macros cast the C way; walk the messages by hand instead.
  std::size_t offset = 0;
  const auto size = static_cast<std::size_t>(got);
  while (offset + sizeof(nlmsghdr) <= size) {
    nlmsghdr header;
    std::memcpy(&header, reply + offset, sizeof header);
    if (header.nlmsg_len < sizeof(nlmsghdr) || offset + header.nlmsg_len > size) break;
    if (header.nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        header.nlmsg_len >= NLMSG_ALIGN(sizeof(nlmsghdr)) + sizeof(inet_diag_msg)) {
      inet_diag_msg found;
      std::memcpy(&found, reply + offset + NLMSG_ALIGN(sizeof(nlmsghdr)), sizeof found);
      return found.idiag_uid;
    }
    if (header.nlmsg_type == NLMSG_ERROR || header.nlmsg_type == NLMSG_DONE) break;
    offset += NLMSG_ALIGN(header.nlmsg_len);
  }
  return std::nullopt;
}

}  // namespace ddprun::rendezvous
