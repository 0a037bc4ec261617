#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "auth/private_file.h"
#include "auth/tls_peer.h"
#include "ddprun/common/safe_files.h"
#include "ddprun/rendezvous/tls.h"

namespace ddprun::rendezvous {

namespace {

// A certificate or key file is a few KiB; anything far larger is not one.
constexpr std::size_t kMaxPemBytes = 1024 * 1024;

// OpenSSL's reason for the last failure, for a message; clears its error queue.
std::string lastSslError() {
  const unsigned long code = ::ERR_get_error();
  ::ERR_clear_error();
  if (code == 0) return "no reason given";
  const char* reason = ::ERR_reason_error_string(code);
  return reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", code);
}

// A certificate file: no secret, but read as carefully as one (the one file reader,
// common::readFile): a FIFO at the path is refused instead of waited on, and a huge file is not
// read whole.
std::string readPublicFile(const std::string& path, const char* what) {
  auto read = common::readFile(path, {kMaxPemBytes, 0, common::Links::kFollow});
  if (!read) {
    throw TlsError(
        fmt::format("cannot read the TLS {} {}: {}", what, path, read.error().describe()));
  }
  if (read->truncated) {
    throw TlsError(fmt::format("the TLS {} {} is over {} bytes: it is not a PEM file", what, path,
                               kMaxPemBytes));
  }
  return std::move(read->bytes);
}

struct BioDeleter {
  void operator()(BIO* bio) const { ::BIO_free(bio); }
};
using Bio = std::unique_ptr<BIO, BioDeleter>;

Bio memoryBio(const std::string& bytes) {
  return Bio(::BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// Every certificate in `pem`, in order; at least one, else TlsError naming `path`.
std::vector<X509*> readCertificates(const std::string& pem, const std::string& path,
                                    const char* what) {
  Bio bio = memoryBio(pem);
  std::vector<X509*> certificates;
  while (X509* certificate = ::PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.push_back(certificate);
  }
  ::ERR_clear_error();  // the end of the file reads as an error
  if (certificates.empty()) {
    throw TlsError(fmt::format(
        "the TLS {} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", what, path));
  }
  return certificates;
}

SSL_CTX* newContext(const SSL_METHOD* method) {
  SSL_CTX* context = ::SSL_CTX_new(method);
  if (context == nullptr) throw TlsError(fmt::format("cannot set up TLS: {}", lastSslError()));
  // TLS 1.3 only: every peer is a ddprun of the same job; nothing older needs to be spoken.
  ::SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION);
  // A store connection is long-lived: no session tickets to issue or keep.
  ::SSL_CTX_set_num_tickets(context, 0);
  ::SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
  return context;
}

}  // namespace

std::optional<std::string> auth::refusedCertificate(const ssl_st* connection) {
  const long verified = ::SSL_get_verify_result(connection);
  if (verified == X509_V_OK) return std::nullopt;
  return std::string(::X509_verify_cert_error_string(verified));
}

ssl_ctx_st* auth::probeContext() {
  // Contexts are safe to share between threads once set up; this one lives as long as the process.
  static SSL_CTX* const context = [] {
    SSL_CTX* probe = newContext(::TLS_client_method());
    ::SSL_CTX_set_verify(probe, SSL_VERIFY_NONE, nullptr);
    return probe;
  }();
  return context;
}

TlsConfig::~TlsConfig() {
  ::SSL_CTX_free(server_);
  ::SSL_CTX_free(client_);
}

std::shared_ptr<const TlsConfig> TlsConfig::load(const TlsFiles& files) {
  std::shared_ptr<TlsConfig> config(new TlsConfig());
  config->files_ = files;
  // What files make a TlsConfig at all. A program that takes them from a person refuses a
  // combination it cannot use before this, in its own spelling (securityOptionsProblem()); these
  // are for a caller that builds TlsFiles itself (a client needs only what it checks a store by).
  if (!files.privateKey.empty() && files.certificate.empty()) {
    throw TlsError(
        fmt::format("the TLS key {} comes without its certificate; give the certificate too",
                    files.privateKey));
  }
  if (files.certificate.empty() && files.authority.empty()) {
    throw TlsError("TLS needs a certificate or the CA to check the store's certificate by");
  }
  // The client side: the store's certificate must chain to the authority (or be the certificate).
  const std::string& authorityPath = files.authority.empty() ? files.certificate : files.authority;
  const char* authorityWhat = files.authority.empty() ? "certificate" : "CA file";
  config->client_ = newContext(::TLS_client_method());
  {
    X509_STORE* trusted = ::SSL_CTX_get_cert_store(config->client_);
    for (X509* certificate : readCertificates(readPublicFile(authorityPath, authorityWhat),
                                              authorityPath, authorityWhat)) {
      ::X509_STORE_add_cert(trusted, certificate);
      ::X509_free(certificate);
    }
    ::ERR_clear_error();  // a duplicate certificate is not an error worth keeping
    // The name is not checked, only the signature: a job's stores move between its nodes (the
    // workers' store is on whichever node is group rank 0), and the job's own CA signs nothing
    // else. docs/security.md says how to make one.
    ::SSL_CTX_set_verify(config->client_, SSL_VERIFY_PEER, nullptr);
  }
  if (files.privateKey.empty()) return config;

  config->server_ = newContext(::TLS_server_method());
  const std::vector<X509*> chain = readCertificates(
      readPublicFile(files.certificate, "certificate"), files.certificate, "certificate");
  bool ok = ::SSL_CTX_use_certificate(config->server_, chain.front()) == 1;
  ::X509_free(chain.front());
  for (std::size_t i = 1; i < chain.size(); ++i) {
    // add0: the context takes the reference.
    if (ok && ::SSL_CTX_add0_chain_cert(config->server_, chain[i]) != 1) ok = false;
    if (!ok) ::X509_free(chain[i]);
  }
  if (!ok) {
    throw TlsError(fmt::format("the TLS certificate {} cannot be used: {}", files.certificate,
                               lastSslError()));
  }
  std::string keyPem;
  try {
    keyPem = auth::readPrivateFile(files.privateKey, "TLS key", kMaxPemBytes);
  } catch (const auth::PrivateFileError& error) {
    throw TlsError(error.what());
  }
  Bio bio = memoryBio(keyPem);
  EVP_PKEY* key = ::PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  ::OPENSSL_cleanse(keyPem.data(), keyPem.size());
  if (key == nullptr) {
    ::ERR_clear_error();
    throw TlsError(
        fmt::format("the TLS key {} holds no unencrypted PEM private key", files.privateKey));
  }
  ok = ::SSL_CTX_use_PrivateKey(config->server_, key) == 1;
  ::EVP_PKEY_free(key);
  if (!ok || ::SSL_CTX_check_private_key(config->server_) != 1) {
    ::ERR_clear_error();
    throw TlsError(fmt::format("the TLS key {} does not belong to the certificate {}",
                               files.privateKey, files.certificate));
  }
  return config;
}

}  // namespace ddprun::rendezvous
