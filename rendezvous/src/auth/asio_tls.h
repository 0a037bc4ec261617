// An Asio SSL context over a TlsConfig's OpenSSL context, for the server and the relay.
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>

namespace ddprun::rendezvous::auth {

// Asio frees the handle it wraps: it gets a reference of its own, and the TlsConfig keeps its.
inline boost::asio::ssl::context asioContext(ssl_ctx_st* handle) {
  ::SSL_CTX_up_ref(handle);
  return boost::asio::ssl::context(handle);
}

}  // namespace ddprun::rendezvous::auth
