// Which local user opened a TCP connection to this host: TCP has no SO_PEERCRED, but the kernel's
// socket table knows each socket's owner, and sock_diag (netlink) looks one socket up exactly,
// however many the host has. The relay uses it to serve only its own user's processes.
#pragma once

#include <sys/types.h>

#include <optional>

#include <boost/asio/ip/tcp.hpp>

namespace ddprun::rendezvous {

// The owner of the connecting socket of a connection accepted on `local` from `peer` (both on
// this host), or nothing when the kernel cannot say (sock_diag unavailable, socket gone).
std::optional<uid_t> localPeerUser(const boost::asio::ip::tcp::endpoint& local,
                                   const boost::asio::ip::tcp::endpoint& peer);

}  // namespace ddprun::rendezvous
