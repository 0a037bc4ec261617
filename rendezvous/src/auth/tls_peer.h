// What a failed TLS handshake says about the peer, for every client side (TcpStore's socket, the
// relay's upstream links), so that all of them tell the same two cases apart the same way.
#pragma once

#include <optional>
#include <string>

struct ssl_st;  // OpenSSL's SSL

namespace ddprun::rendezvous::auth {

// Why the peer's certificate was refused in `connection`'s handshake (OpenSSL's reason), or
// nothing when it was not: a handshake that failed without a refused certificate means the peer
// does not speak TLS.
std::optional<std::string> refusedCertificate(const ssl_st* connection);

}  // namespace ddprun::rendezvous::auth
