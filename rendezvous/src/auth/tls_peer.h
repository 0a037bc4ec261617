// What a failed TLS handshake says about the peer, for every client side (TcpStore's socket, the
// relay's upstream links), so that all of them tell the same two cases apart the same way; and the
// context a client asks a peer with whether it speaks TLS at all.
#pragma once

#include <optional>
#include <string>

struct ssl_st;      // OpenSSL's SSL
struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace ddprun::rendezvous::auth {

// Why the peer's certificate was refused in `connection`'s handshake (OpenSSL's reason), or
// nothing when it was not: a handshake that failed without a refused certificate means the peer
// does not speak TLS.
std::optional<std::string> refusedCertificate(const ssl_st* connection);

// A client context (TLS 1.3, as the job's) that checks no certificate: only for asking whether a
// peer that failed a client's handshake speaks TLS at all (client/store_handshake.h), never for
// data. One per process, built on first use. Throws TlsError if OpenSSL cannot make it.
ssl_ctx_st* probeContext();

}  // namespace ddprun::rendezvous::auth
