// Blocking calls over Asio's asynchronous operations: each operation is started and the
// connection's own io_context is run until it completes or the deadline passes, when the socket
// is closed (which completes the operation as aborted). A plain socket or an Asio SSL stream
// carries Beast's HTTP/1.1 messages; there is no HTTP code of our own.
#include "etcd/http_connection.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <optional>

#include "auth/private_file.h"
#include "ddprun/common/safe_files.h"
#include "ddprun/common/text.h"

namespace ddprun::rendezvous::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

class TlsClientContext {
 public:
  ssl::context context{ssl::context::tls_client};
};

namespace {

// A unary answer this large is no etcd answer a rendezvous asks for; the bound keeps a wrong
// peer from filling memory.
constexpr std::uint64_t kMaxResponseBytes = 64u << 20;

// A certificate or key file is a few KiB; anything far larger is not one.
constexpr std::size_t kMaxPemBytes = 1024 * 1024;

[[noreturn]] void tlsFileError(const std::string& what, const std::string& path,
                               const std::string& why) {
  throw EtcdError(EtcdError::Code::kRejected, "etcd TLS: cannot use the " + what + " '" +
                                                  common::printablePrefix(path) + "': " + why +
                                                  " (give a readable PEM file)");
}

// A certificate file: no secret, but read with the one careful reader (a FIFO is refused, not
// waited on; a huge file is not read whole).
std::string readPublicPem(const std::string& path, const std::string& what) {
  auto read = common::readFile(path, {kMaxPemBytes, 0, common::Links::kFollow});
  if (!read) tlsFileError(what, path, read.error().describe());
  if (read->truncated) tlsFileError(what, path, "it is over 1 MiB");
  return std::move(read->bytes);
}

std::string describe(const error_code& ec) {
  if (ec == asio::error::connection_refused) return "connection refused (is etcd running there?)";
  if (ec == http::error::end_of_stream || ec == asio::error::eof)
    return "the member closed the connection";
  return ec.message();
}

}  // namespace

std::shared_ptr<TlsClientContext> loadTlsClientContext(const EtcdTlsFiles& files) {
  auto tls = std::make_shared<TlsClientContext>();
  ssl::context& context = tls->context;
  // TLS 1.2 at least: etcd 3.4 (Go) offers 1.2 and 1.3.
  SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
  error_code ec;
  if (files.caCertificate.empty()) {
    context.set_default_verify_paths(ec);
    if (ec) tlsFileError("system's CA store", "(default)", ec.message());
  } else {
    const std::string pem = readPublicPem(files.caCertificate, "CA certificate");
    context.add_certificate_authority(asio::buffer(pem), ec);
    if (ec) tlsFileError("CA certificate", files.caCertificate, ec.message());
  }
  if (files.certificate.empty() != files.privateKey.empty()) {
    throw EtcdError(EtcdError::Code::kRejected,
                    "etcd TLS: a client certificate needs its key and a key its certificate "
                    "(give both, or neither)");
  }
  if (!files.certificate.empty()) {
    const std::string certificate = readPublicPem(files.certificate, "client certificate");
    context.use_certificate_chain(asio::buffer(certificate), ec);
    if (ec) tlsFileError("client certificate", files.certificate, ec.message());
    // The key as every key of ddprun is read: a regular file of this user, mode 600.
    std::string key;
    try {
      key = auth::readPrivateFile(files.privateKey, "etcd TLS key", kMaxPemBytes);
    } catch (const auth::PrivateFileError& error) {
      throw EtcdError(EtcdError::Code::kRejected, std::string("etcd TLS: ") + error.what());
    }
    context.use_private_key(asio::buffer(key), ssl::context::pem, ec);
    OPENSSL_cleanse(key.data(), key.size());
    if (ec) tlsFileError("client key", files.privateKey, ec.message());
  }
  context.set_verify_mode(ssl::verify_peer);
  return tls;
}

struct HttpConnection::Impl {
  EtcdEndpoint endpoint;
  std::string hostHeader;
  asio::io_context io{1};
  tcp::resolver resolver{io};
  std::unique_ptr<tcp::socket> plain;
  std::unique_ptr<ssl::stream<tcp::socket>> tls;
  beast::flat_buffer buffer;

  // The streamed response (a watch): its parser, the chunk a read fills, and the read that may
  // still be waiting from an earlier readStream().
  std::optional<http::response_parser<http::buffer_body>> streamParser;
  std::array<char, 16384> chunk{};
  bool readPending = false;
  bool readDone = false;
  error_code readError;

  tcp::socket& socket() { return tls ? tls->next_layer() : *plain; }

  template <typename F>
  decltype(auto) withStream(F&& f) {
    if (tls) return f(*tls);
    return f(*plain);
  }

  void close() {
    error_code ignored;
    resolver.cancel();
    socket().close(ignored);
  }

  // Starts an operation through `start(handler)` and runs the loop until it completes; when the
  // deadline passes first, the socket is closed, the operation completes as aborted, and the
  // result is timed_out.
  template <typename Start>
  error_code await(Start&& start, Deadline deadline) {
    bool done = false;
    error_code result;
    start([&](error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    io.restart();
    while (!done) {
      if (io.run_one_until(deadline) > 0) continue;
      if (done) break;
      if (Clock::now() >= deadline) {
        close();
        io.restart();
        while (!done && io.run_one() > 0) {
        }
        return asio::error::timed_out;
      }
      io.restart();
    }
    return result;
  }

  [[noreturn]] void fail(TransportError::Stage stage, const std::string& doing,
                         const error_code& ec) {
    close();
    throw TransportError(
        stage, ec == asio::error::timed_out,
        doing + ": " +
            (ec == asio::error::timed_out ? "no answer before the deadline" : describe(ec)));
  }

  http::request<http::string_body> makeRequest(bool post, std::string_view target, std::string body,
                                               const HttpHeaders& headers) {
    http::request<http::string_body> request{post ? http::verb::post : http::verb::get,
                                             beast::string_view(target.data(), target.size()), 11};
    request.set(http::field::host, hostHeader);
    request.set(http::field::user_agent, "ddprun-etcd");
    if (post) request.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) request.set(name, value);
    request.keep_alive(true);
    request.body() = std::move(body);
    request.prepare_payload();
    return request;
  }
};

HttpConnection::HttpConnection(const EtcdEndpoint& endpoint, std::shared_ptr<TlsClientContext> tls,
                               Deadline deadline)
    : impl_(std::make_unique<Impl>()) {
  Impl& c = *impl_;
  c.endpoint = endpoint;
  const bool v6 = endpoint.host.find(':') != std::string::npos;
  c.hostHeader =
      (v6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" + std::to_string(endpoint.port);
  if (endpoint.scheme == EtcdEndpoint::Scheme::kHttps) {
    if (!tls) {
      throw TransportError(TransportError::Stage::kConnect, false, "https without TLS settings");
    }
    c.tls = std::make_unique<ssl::stream<tcp::socket>>(c.io, tls->context);
  } else {
    c.plain = std::make_unique<tcp::socket>(c.io);
  }

  // An address is used as it is; a name is resolved (in Asio's resolver thread, abandoned at
  // the deadline).
  std::vector<tcp::endpoint> addresses;
  error_code ec;
  const auto literal = asio::ip::make_address(endpoint.host, ec);
  const bool isAddress = !ec;
  if (isAddress) {
    addresses.emplace_back(literal, endpoint.port);
  } else {
    tcp::resolver::results_type results;
    ec = c.await(
        [&](auto handler) {
          c.resolver.async_resolve(
              endpoint.host, std::to_string(endpoint.port),
              [&results, handler](error_code e, tcp::resolver::results_type r) mutable {
                results = std::move(r);
                handler(e);
              });
        },
        deadline);
    if (ec)
      c.fail(TransportError::Stage::kConnect,
             "cannot resolve " + common::printablePrefix(endpoint.host), ec);
    for (const auto& entry : results) addresses.push_back(entry.endpoint());
  }
  ec =
      c.await([&](auto handler) { asio::async_connect(c.socket(), addresses, handler); }, deadline);
  if (ec) c.fail(TransportError::Stage::kConnect, "cannot connect", ec);
  error_code ignored;
  c.socket().set_option(tcp::no_delay(true), ignored);

  if (c.tls) {
    // SNI for a name, and the certificate checked against the name or address written in the
    // endpoint (RFC 2818: an IP address must be in the certificate's subjectAltName).
    if (!isAddress) {
      // SSL_set_tlsext_host_name without its macro's C cast.
      SSL_ctrl(c.tls->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(endpoint.host.c_str()));
    }
    c.tls->set_verify_callback(ssl::host_name_verification(endpoint.host));
    ec = c.await([&](auto handler) { c.tls->async_handshake(ssl::stream_base::client, handler); },
                 deadline);
    if (ec) c.fail(TransportError::Stage::kConnect, "TLS handshake failed", ec);
  }
}

HttpConnection::~HttpConnection() { impl_->close(); }

const EtcdEndpoint& HttpConnection::endpoint() const { return impl_->endpoint; }

HttpResponse HttpConnection::exchange(bool post, std::string_view target, std::string body,
                                      const HttpHeaders& headers, Deadline deadline) {
  Impl& c = *impl_;
  auto request = c.makeRequest(post, target, std::move(body), headers);
  error_code ec = c.withStream([&](auto& stream) {
    return c.await([&](auto handler) { http::async_write(stream, request, handler); }, deadline);
  });
  if (ec) c.fail(TransportError::Stage::kExchange, "sending the request failed", ec);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBytes);
  ec = c.withStream([&](auto& stream) {
    return c.await([&](auto handler) { http::async_read(stream, c.buffer, parser, handler); },
                   deadline);
  });
  if (ec) c.fail(TransportError::Stage::kExchange, "reading the answer failed", ec);
  auto response = parser.release();
  // A member that says it closes the connection (or an HTTP/1.0 peer) does not get another
  // request on it.
  if (!response.keep_alive()) c.close();
  return {response.result_int(), std::move(response.body())};
}

unsigned HttpConnection::startStream(std::string_view target, std::string body,
                                     const HttpHeaders& headers, Deadline deadline,
                                     std::string& errorBody) {
  Impl& c = *impl_;
  auto request = c.makeRequest(true, target, std::move(body), headers);
  error_code ec = c.withStream([&](auto& stream) {
    return c.await([&](auto handler) { http::async_write(stream, request, handler); }, deadline);
  });
  if (ec) c.fail(TransportError::Stage::kExchange, "sending the request failed", ec);
  c.streamParser.emplace();
  // A watch streams for as long as it lives: no bound on the whole body, only on each line
  // (the caller's).
  c.streamParser->body_limit(boost::none);
  ec = c.withStream([&](auto& stream) {
    return c.await(
        [&](auto handler) { http::async_read_header(stream, c.buffer, *c.streamParser, handler); },
        deadline);
  });
  if (ec) c.fail(TransportError::Stage::kExchange, "reading the answer failed", ec);
  const unsigned status = c.streamParser->get().result_int();
  if (status != 200) {
    // An error answer is short: read it whole (bounded) for its message. etcd answers a
    // hasleader watch on a member without a leader this way: 503 and one stream error.
    while (!c.streamParser->is_done() && errorBody.size() < 65536) {
      std::string more;
      try {
        more = readStream(deadline);
      } catch (const TransportError&) {
        break;  // its end (or a break): what came is the message
      }
      if (more.empty()) break;
      errorBody += more;
    }
  }
  return status;
}

std::string HttpConnection::readStream(Deadline deadline) {
  Impl& c = *impl_;
  if (!c.streamParser) throw TransportError(TransportError::Stage::kExchange, false, "no stream");
  for (;;) {
    if (c.streamParser->is_done()) {
      c.close();
      throw TransportError(TransportError::Stage::kExchange, false, "the member ended the stream");
    }
    if (!c.readPending) {
      c.streamParser->get().body().data = c.chunk.data();
      c.streamParser->get().body().size = c.chunk.size();
      c.readPending = true;
      c.readDone = false;
      c.withStream([&](auto& stream) {
        http::async_read_some(stream, c.buffer, *c.streamParser, [&c](error_code ec, std::size_t) {
          c.readError = ec;
          c.readDone = true;
        });
        return 0;
      });
    }
    c.io.restart();
    while (!c.readDone) {
      if (c.io.run_one_until(deadline) > 0) continue;
      if (c.readDone || Clock::now() >= deadline) break;
      c.io.restart();
    }
    if (!c.readDone) return {};  // the read stays pending for the next call
    c.readPending = false;
    // need_buffer: the chunk is full, which is no error.
    if (c.readError && c.readError != http::error::need_buffer) {
      c.fail(TransportError::Stage::kExchange, "the stream broke", c.readError);
    }
    const std::size_t got = c.chunk.size() - c.streamParser->get().body().size;
    // A read may have taken only a chunk's framing: read on, as long as the deadline allows.
    if (got > 0) return std::string(c.chunk.data(), got);
    if (Clock::now() >= deadline) return {};
  }
}

bool HttpConnection::reusable() {
  Impl& c = *impl_;
  if (!c.socket().is_open() || c.buffer.size() != 0 || c.streamParser) return false;
  pollfd ready{c.socket().native_handle(), POLLIN, 0};
  return ::poll(&ready, 1, 0) == 0;
}

}  // namespace ddprun::rendezvous::etcd
