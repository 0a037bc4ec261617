// Self-signed TLS certificates for tests, made with OpenSSL's API (no openssl command needed):
// an EC P-256 key and a certificate valid for a day, written as PEM files (the key mode 600).
// Header-only; the test target links OpenSSL::SSL.
#pragma once

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace ddprun::test {

struct TestCertificate {
  std::string certificate;  // PEM file paths
  std::string privateKey;
};

// Writes `<dir>/<name>.crt` and `<dir>/<name>.key`, with `commonName` as the subject.
inline TestCertificate writeSelfSignedCertificate(const std::string& dir, const std::string& name,
                                                  const std::string& commonName = "ddprun-test") {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* certificate = X509_new();
  if (key == nullptr || certificate == nullptr) throw std::runtime_error("cannot make a test key");
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -60);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 24 * 3600);
  X509_set_pubkey(certificate, key);
  X509_NAME* subject = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(commonName.c_str()), -1, -1, 0);
  X509_set_issuer_name(certificate, subject);
  X509_sign(certificate, key, EVP_sha256());
  TestCertificate files{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  FILE* out = std::fopen(files.certificate.c_str(), "w");
  PEM_write_X509(out, certificate);
  std::fclose(out);
  out = std::fopen(files.privateKey.c_str(), "w");
  PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(out);
  ::chmod(files.privateKey.c_str(), 0600);
  X509_free(certificate);
  EVP_PKEY_free(key);
  return files;
}

}  // namespace ddprun::test
