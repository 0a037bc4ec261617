// OpenSSL loaded on demand, for ddprun only: the first call into OpenSSL (a token's HMAC or nonce,
// a TLS context, a TLS connection) loads libssl.so.3 and libcrypto.so.3 with dlopen; a job that
// uses neither never maps them.
//
// Why: the agent's peak RSS (docs/benchmarks.md, "Launch at the floor"). Linked as usual, the two
// libraries cost every launch ~1.65 MiB of touched pages before main runs: the loader applies
// libcrypto's 17,000 relocations (its whole .data.rel.ro and relocation tables), looks symbols up
// through its tables and runs its constructor, for a job that calls nothing in them.
//
// How: ddprun links this object instead of libssl and libcrypto (launcher/CMakeLists.txt, with
// --as-needed so that they are not recorded as needed). It defines each OpenSSL function that
// ddprun's code and Boost.Asio's TLS headers call, with the signature of OpenSSL's own header (the
// compiler rejects a definition that differs from the declaration), forwarding to the real
// function found with dlsym. Everything else (ddprun-rendezvous, the worker runtime, the tests)
// links OpenSSL as usual. The list is ddprun's undefined OpenSSL symbols (`nm -D
// --undefined-only ddprun`, of the RelWithDebInfo and of the Debug build: -O0 keeps two more of
// Asio's); a call to a function missing from it still works but brings the libraries back at
// start-up, which tests/launcher/openssl_on_demand_test.py reports.
//
// When the library cannot be loaded: one line naming the fix, exit code 2 (docs/errors.md). This
// happens at the first use, while the job is being set up (the token or TLS options are read
// before a worker starts); the guardian ends any worker with the agent.

#include <dlfcn.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "ddprun/common/text.h"

// X(return type, name, (parameters), (arguments)): every OpenSSL function ddprun calls.
#define DDPRUN_OPENSSL_FUNCTIONS(X)                                                                \
  X(long, BIO_ctrl, (BIO * bp, int cmd, long larg, void* parg), (bp, cmd, larg, parg))             \
  X(size_t, BIO_ctrl_pending, (BIO * b), (b))                                                      \
  X(int, BIO_free, (BIO * a), (a))                                                                 \
  X(char*, BIO_get_callback_arg, (const BIO* b), (b))                                              \
  X(int, BIO_new_bio_pair, (BIO * *bio1, size_t writebuf1, BIO * *bio2, size_t writebuf2),         \
    (bio1, writebuf1, bio2, writebuf2))                                                            \
  X(BIO*, BIO_new_mem_buf, (const void* buf, int len), (buf, len))                                 \
  X(int, BIO_read, (BIO * b, void* data, int dlen), (b, data, dlen))                               \
  X(void, BIO_set_callback_arg, (BIO * b, char* arg), (b, arg))                                    \
  X(void, BIO_set_callback_ex, (BIO * b, BIO_callback_fn_ex callback), (b, callback))              \
  X(int, BIO_write, (BIO * b, const void* data, int dlen), (b, data, dlen))                        \
  X(void, CRYPTO_free, (void* ptr, const char* file, int line), (ptr, file, line))                 \
  X(int, CRYPTO_memcmp, (const void* in_a, const void* in_b, size_t len), (in_a, in_b, len))       \
  X(void, ERR_clear_error, (), ())                                                                 \
  X(unsigned long, ERR_get_error, (), ())                                                          \
  X(unsigned long, ERR_peek_error, (), ())                                                         \
  X(unsigned long, ERR_peek_last_error, (), ())                                                    \
  X(const char*, ERR_reason_error_string, (unsigned long e), (e))                                  \
  X(void, EVP_PKEY_free, (EVP_PKEY * pkey), (pkey))                                                \
  X(const EVP_MD*, EVP_sha256, (), ())                                                             \
  X(unsigned char*, HMAC,                                                                          \
    (const EVP_MD* evp_md, const void* key, int key_len, const unsigned char* data,                \
     size_t data_len, unsigned char* md, unsigned int* md_len),                                    \
    (evp_md, key, key_len, data, data_len, md, md_len))                                            \
  X(void, OPENSSL_cleanse, (void* ptr, size_t len), (ptr, len))                                    \
  X(EVP_PKEY*, PEM_read_bio_PrivateKey, (BIO * out, EVP_PKEY * *x, pem_password_cb * cb, void* u), \
    (out, x, cb, u))                                                                               \
  X(X509*, PEM_read_bio_X509, (BIO * out, X509 * *x, pem_password_cb * cb, void* u),               \
    (out, x, cb, u))                                                                               \
  X(X509*, PEM_read_bio_X509_AUX, (BIO * out, X509 * *x, pem_password_cb * cb, void* u),           \
    (out, x, cb, u))                                                                               \
  X(int, RAND_bytes, (unsigned char* buf, int num), (buf, num))                                    \
  X(EVP_PKEY*, d2i_PrivateKey_bio, (BIO * bp, EVP_PKEY * *a), (bp, a))                             \
  X(int, SSL_CTX_check_private_key, (const SSL_CTX* ctx), (ctx))                                   \
  X(long, SSL_CTX_ctrl, (SSL_CTX * ctx, int cmd, long larg, void* parg), (ctx, cmd, larg, parg))   \
  X(void, SSL_CTX_free, (SSL_CTX * a0), (a0))                                                      \
  X(X509_STORE*, SSL_CTX_get_cert_store, (const SSL_CTX* a0), (a0))                                \
  X(pem_password_cb*, SSL_CTX_get_default_passwd_cb, (SSL_CTX * ctx), (ctx))                       \
  X(void*, SSL_CTX_get_default_passwd_cb_userdata, (SSL_CTX * ctx), (ctx))                         \
  X(void*, SSL_CTX_get_ex_data, (const SSL_CTX* ssl, int idx), (ssl, idx))                         \
  X(SSL_verify_cb, SSL_CTX_get_verify_callback, (const SSL_CTX* ctx), (ctx))                       \
  X(SSL_CTX*, SSL_CTX_new, (const SSL_METHOD* meth), (meth))                                       \
  X(void, SSL_CTX_set_default_passwd_cb_userdata, (SSL_CTX * ctx, void* u), (ctx, u))              \
  X(int, SSL_CTX_set_default_verify_paths, (SSL_CTX * ctx), (ctx))                                 \
  X(int, SSL_CTX_set_ex_data, (SSL_CTX * ssl, int idx, void* data), (ssl, idx, data))              \
  X(int, SSL_CTX_set_num_tickets, (SSL_CTX * ctx, size_t num_tickets), (ctx, num_tickets))         \
  X(uint64_t, SSL_CTX_set_options, (SSL_CTX * ctx, uint64_t op), (ctx, op))                        \
  X(void, SSL_CTX_set_verify, (SSL_CTX * ctx, int mode, SSL_verify_cb callback),                   \
    (ctx, mode, callback))                                                                         \
  X(int, SSL_CTX_up_ref, (SSL_CTX * ctx), (ctx))                                                   \
  X(int, SSL_CTX_use_PrivateKey, (SSL_CTX * ctx, EVP_PKEY * pkey), (ctx, pkey))                    \
  X(int, SSL_CTX_use_certificate, (SSL_CTX * ctx, X509 * x), (ctx, x))                             \
  X(int, SSL_accept, (SSL * ssl), (ssl))                                                           \
  X(int, SSL_connect, (SSL * ssl), (ssl))                                                          \
  X(long, SSL_ctrl, (SSL * ssl, int cmd, long larg, void* parg), (ssl, cmd, larg, parg))           \
  X(void, SSL_free, (SSL * ssl), (ssl))                                                            \
  X(int, SSL_get_error, (const SSL* s, int ret_code), (s, ret_code))                               \
  X(void*, SSL_get_ex_data, (const SSL* ssl, int idx), (ssl, idx))                                 \
  X(int, SSL_get_ex_data_X509_STORE_CTX_idx, (), ())                                               \
  X(BIO*, SSL_get_rbio, (const SSL* s), (s))                                                       \
  X(int, SSL_get_shutdown, (const SSL* ssl), (ssl))                                                \
  X(int, SSL_get_verify_mode, (const SSL* s), (s))                                                 \
  X(long, SSL_get_verify_result, (const SSL* ssl), (ssl))                                          \
  X(SSL*, SSL_new, (SSL_CTX * ctx), (ctx))                                                         \
  X(int, SSL_read, (SSL * ssl, void* buf, int num), (ssl, buf, num))                               \
  X(void, SSL_set_bio, (SSL * s, BIO * rbio, BIO * wbio), (s, rbio, wbio))                         \
  X(int, SSL_set_ex_data, (SSL * ssl, int idx, void* data), (ssl, idx, data))                      \
  X(int, SSL_set_fd, (SSL * s, int fd), (s, fd))                                                   \
  X(void, SSL_set_verify, (SSL * s, int mode, SSL_verify_cb callback), (s, mode, callback))        \
  X(int, SSL_write, (SSL * ssl, const void* buf, int num), (ssl, buf, num))                        \
  X(const SSL_METHOD*, TLS_method, (), ())                                                         \
  X(const SSL_METHOD*, TLS_client_method, (), ())                                                  \
  X(const SSL_METHOD*, TLS_server_method, (), ())                                                  \
  X(X509*, X509_STORE_CTX_get_current_cert, (const X509_STORE_CTX* ctx), (ctx))                    \
  X(int, X509_STORE_CTX_get_error_depth, (const X509_STORE_CTX* ctx), (ctx))                       \
  X(void*, X509_STORE_CTX_get_ex_data, (const X509_STORE_CTX* ctx, int idx), (ctx, idx))           \
  X(int, X509_STORE_add_cert, (X509_STORE * ctx, X509 * x), (ctx, x))                              \
  X(int, X509_check_host,                                                                          \
    (X509 * x, const char* chk, size_t chklen, unsigned int flags, char** peername),               \
    (x, chk, chklen, flags, peername))                                                             \
  X(int, X509_check_ip_asc, (X509 * x, const char* ipasc, unsigned int flags), (x, ipasc, flags))  \
  X(void, X509_free, (X509 * a), (a))                                                              \
  X(const char*, X509_verify_cert_error_string, (long n), (n))

namespace {

constexpr const char* kLibrary = "libssl.so.3";  // libcrypto.so.3 comes with it as its dependency

[[noreturn]] void cannotLoad(const std::string& what) {
  const std::string line =
      "ddprun: error: the job token and TLS need OpenSSL 3, which could not be loaded (" +
      ddprun::common::printable(what) +
      "); install it (Debian and Ubuntu: apt install libssl3), or run without "
      "a token and TLS\n";
  // write(2), not the logger: this may run on any thread, before or after logging is set up.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
  std::_Exit(2);
}

struct OpenSsl {
#define DDPRUN_OPENSSL_POINTER(ret, name, params, args) decltype(&::name) name = nullptr;
  DDPRUN_OPENSSL_FUNCTIONS(DDPRUN_OPENSSL_POINTER)
#undef DDPRUN_OPENSSL_POINTER
};

OpenSsl load() {
  // RTLD_LOCAL: the symbols serve only the pointers below; nothing else in ddprun binds to them.
  void* library = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = ::dlerror();
    cannotLoad(error != nullptr ? error : kLibrary);
  }
  OpenSsl functions;
#define DDPRUN_OPENSSL_RESOLVE(ret, name, params, args)                                 \
  functions.name = reinterpret_cast<decltype(functions.name)>(::dlsym(library, #name)); \
  if (functions.name == nullptr) cannotLoad(std::string(kLibrary) + " has no " #name);
  DDPRUN_OPENSSL_FUNCTIONS(DDPRUN_OPENSSL_RESOLVE)
#undef DDPRUN_OPENSSL_RESOLVE
  return functions;
}

// Loaded once, by whichever thread calls first (a function-local static is initialised once).
const OpenSsl& openSsl() {
  static const OpenSsl functions = load();
  return functions;
}

}  // namespace

extern "C" {
#define DDPRUN_OPENSSL_FORWARD(ret, name, params, args) \
  ret name params { return openSsl().name args; }
DDPRUN_OPENSSL_FUNCTIONS(DDPRUN_OPENSSL_FORWARD)
#undef DDPRUN_OPENSSL_FORWARD
}
