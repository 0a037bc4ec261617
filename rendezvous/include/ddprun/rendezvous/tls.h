// TLS for the store's network connections: optional, on top of the job's token (docs/security.md).
// The store presents a certificate; clients accept it only when the job's CA signed it; every byte
// after the TLS handshake, the token handshake included, is private. The token still decides who
// is admitted: TLS adds privacy and the store's identity, not client authentication.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace ddprun::rendezvous {

// The files a job's TLS is made of (PEM). Agents take them as --rdzv-conf tls_cert, tls_key and
// tls_ca; ddprun-rendezvous as --tls-cert and --tls-key only: it serves and checks no store's
// certificate, so it has no CA option. security_options.h holds the rules of their combination.
struct TlsFiles {
  std::string certificate;  // the store's certificate (and its chain)
  std::string privateKey;   // its key, mode 600: needed to host a store
  std::string authority;    // the CAs a client accepts; empty: the certificate itself (self-signed)
};

// A TLS file cannot be used: one line naming the file, what is wrong and the fix.
class TlsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The files, loaded and checked, as OpenSSL contexts (TLS 1.3 only). Immutable; shared by every
// connection that uses it.
class TlsConfig {
 public:
  // Throws TlsError: a file missing or unreadable, not PEM, a key readable by others, a key that
  // does not belong to the certificate, no certificate (or authority) to check a store by.
  static std::shared_ptr<const TlsConfig> load(const TlsFiles& files);
  ~TlsConfig();
  TlsConfig(const TlsConfig&) = delete;
  TlsConfig& operator=(const TlsConfig&) = delete;

  const TlsFiles& files() const { return files_; }
  // A certificate and its key: this process can host a TLS store.
  bool canServe() const { return server_ != nullptr; }
  // For a store's server side; null unless canServe().
  ssl_ctx_st* serverContext() const { return server_; }
  // For a client: checks the store's certificate against the authority.
  ssl_ctx_st* clientContext() const { return client_; }

 private:
  TlsConfig() = default;
  TlsFiles files_;
  ssl_ctx_st* server_ = nullptr;
  ssl_ctx_st* client_ = nullptr;
};

}  // namespace ddprun::rendezvous
