#include "ddprun/rendezvous/health_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <list>
#include <optional>
#include <string_view>
#include <utility>

#include "ddprun/common/text.h"

namespace ddprun::rendezvous {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::string_view kHealthPath = "/healthz";
constexpr std::string_view kMetricsPath = "/metrics";
constexpr std::string_view kJson = "application/json";
// What Prometheus' scraper asks for and parses as the text format.
constexpr std::string_view kMetricsText = "text/plain; version=0.0.4; charset=utf-8";
// After an accept error (out of descriptors, say) the listener waits this long before it accepts
// again, rather than spinning on the same error.
constexpr std::chrono::milliseconds kAcceptRetry{100};

constexpr std::size_t kMaxHostName = 253;

std::string errorJson(std::string_view what) { return fmt::format("{{\"error\": \"{}\"}}", what); }

// An IPv4-mapped IPv6 address (a v4 client of a "::" bind) as the IPv4 address it is, so that one
// client is one address however the server is bound.
asio::ip::address plain(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  return address;
}

std::optional<asio::ip::address> ipLiteral(std::string_view text) {
  boost::system::error_code error;
  const asio::ip::address address = asio::ip::make_address(std::string(text), error);
  if (error) return std::nullopt;
  return plain(address);
}

bool sameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The host of a `Host:` value: "name", "name:port", "1.2.3.4:port", "[::1]:port". Nothing when
// the value is none of these (an unbracketed IPv6 literal is ambiguous and refused too).
std::optional<std::string_view> hostPart(std::string_view value) {
  std::string_view host;
  std::string_view rest;
  if (!value.empty() && value.front() == '[') {
    const auto close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = value.substr(1, close - 1);
    rest = value.substr(close + 1);
    if (host.find(':') == std::string_view::npos) return std::nullopt;  // brackets are IPv6's
  } else {
    const auto colon = value.find(':');
    host = value.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : value.substr(colon);
  }
  if (!rest.empty()) {
    const std::string_view port = rest.substr(1);
    if (rest.front() != ':' || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
  }
  if (host.empty()) return std::nullopt;
  return host;
}

bool isDnsName(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostName) return false;
  std::size_t label = 0;
  for (const char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    ++label;
  }
  return label > 0;
}

}  // namespace

bool healthHostAllowed(std::string_view value, const asio::ip::address& bound,
                       const std::vector<std::string>& names) {
  const std::optional<std::string_view> host = hostPart(value);
  if (!host) return false;
  const asio::ip::address self = plain(bound);
  if (const auto address = ipLiteral(*host)) {
    return self.is_unspecified() || *address == self ||
           (self.is_loopback() && address->is_loopback());
  }
  if ((self.is_loopback() || self.is_unspecified()) && sameName(*host, "localhost")) return true;
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& name) { return sameName(*host, name); });
}

std::vector<std::string> parseHealthHostNames(std::string_view list) {
  std::vector<std::string> names;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item.empty()) continue;
    if (ipLiteral(item)) {
      throw HealthServerError(
          HealthServerError::Code::kHostName,
          fmt::format("'{}' is an IP address; give host names only (addresses are checked "
                      "against the bound one)",
                      common::printable(item)));
    }
    if (!isDnsName(item)) {
      throw HealthServerError(
          HealthServerError::Code::kHostName,
          fmt::format("'{}' is not a host name (letters, digits, '-', '_' and '.', at most {} "
                      "characters)",
                      common::printablePrefix(item), kMaxHostName));
    }
    names.emplace_back(item);
  }
  return names;
}

class HealthServer::Impl : public std::enable_shared_from_this<HealthServer::Impl> {
 public:
  class Session;
  // Open connections, oldest first; each session holds its own place to leave in O(1).
  using Sessions = std::list<Session*>;

  Impl(asio::io_context& io, HealthServerOptions options, Report report, Metrics metrics)
      : io_(io),
        options_(std::move(options)),
        report_(std::move(report)),
        metrics_(std::move(metrics)),
        acceptor_(io),
        retry_(io) {}

  void listen() {
    boost::system::error_code error;
    const asio::ip::address address = asio::ip::make_address(options_.host, error);
    if (error) {
      throw HealthServerError(HealthServerError::Code::kAddress,
                              fmt::format("'{}' is not an IP address", options_.host));
    }
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), error);
    // Reusable at once, so that a restarted agent or daemon binds its probe port again while the
    // previous one's answered connections sit in TIME_WAIT.
    if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
    if (error) {
      throw HealthServerError(
          HealthServerError::Code::kBind,
          fmt::format("cannot listen on {}:{}: {}", options_.host, options_.port, error.message()));
    }
    bound_ = acceptor_.local_endpoint(error);
    accept();
  }

  void close() {
    closed_ = true;
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    retry_.cancel();
    closeSessions();
  }

  std::uint16_t port() const { return bound_.port(); }
  std::string address() const {
    return bound_.address().is_v6()
               ? fmt::format("[{}]:{}", bound_.address().to_string(), bound_.port())
               : fmt::format("{}:{}", bound_.address().to_string(), bound_.port());
  }

  const HealthServerOptions& options() const { return options_; }
  asio::ip::address boundAddress() const { return bound_.address(); }
  bool closed() const { return closed_; }
  HealthReport report() const { return report_(); }
  bool servesMetrics() const { return static_cast<bool>(metrics_); }
  std::string metrics() const { return metrics_(); }
  void forget(Sessions::iterator place) { sessions_.erase(place); }

 private:
  void accept();
  void admit(tcp::socket socket);
  bool makeRoom(const asio::ip::address& source);
  bool evictOldestReading(const std::optional<asio::ip::address>& source);
  void closeSessions();

  asio::io_context& io_;
  HealthServerOptions options_;
  Report report_;
  Metrics metrics_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  tcp::endpoint bound_;
  bool closed_ = false;
  Sessions sessions_;
};

// One connection: read one request (header bounded, no body, under the request deadline), answer
// it, close. Owned by its pending operations (shared_ptr); the server lists it, oldest first, to
// count it and to close it: at the server's end, or to make room while it has not yet sent a
// whole request (reading()).
class HealthServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Impl> server, tcp::socket socket, asio::ip::address source)
      : server_(std::move(server)),
        source_(std::move(source)),
        stream_(std::move(socket)),
        // The header's limit is enforced by the parser; the buffer is only sized for it.
        buffer_(server_->options().maxHeaderBytes + 1024) {
    parser_.header_limit(static_cast<std::uint32_t>(server_->options().maxHeaderBytes));
  }
  ~Session() { unlist(); }

  void list(Sessions::iterator place) { place_ = place; }
  const asio::ip::address& source() const { return source_; }
  bool reading() const { return reading_; }

  void start() {
    stream_.expires_after(server_->options().requestDeadline);
    http::async_read(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code error, std::size_t) { self->onRead(error); });
  }

  // Closes the connection and leaves the server's list now, so that it no longer counts against
  // the caps while its aborted operation is still to run.
  void close() {
    unlist();
    boost::system::error_code ignored;
    stream_.socket().close(ignored);
  }

 private:
  void unlist() {
    if (!place_) return;
    server_->forget(*place_);
    place_.reset();
  }

  void onRead(beast::error_code error) {
    reading_ = false;
    if (server_->closed()) return;
    if (error == http::error::header_limit ||
        error == beast::error_code(http::error::buffer_overflow)) {
      return answer(http::status::request_header_fields_too_large,
                    errorJson("request header too large"), false);
    }
    if (error == http::error::unexpected_body || error == http::error::body_limit) {
      return answer(http::status::payload_too_large, errorJson("a health request has no body"),
                    false);
    }
    // A timeout (the slow client), a peer that went away, or a closed server: nothing to answer.
    if (error == beast::error::timeout || error == http::error::end_of_stream ||
        error == asio::error::operation_aborted || error == asio::error::eof ||
        error == asio::error::connection_reset) {
      return close();
    }
    if (error) return answer(http::status::bad_request, errorJson("malformed request"), false);

    const auto& request = parser_.get();
    const bool head = request.method() == http::verb::head;
    const auto hosts = request.count(http::field::host);
    if (hosts > 1 || (hosts == 0 && request.version() >= 11)) {
      return answer(http::status::bad_request,
                    errorJson("an HTTP/1.1 request needs exactly one Host header"), head);
    }
    if (hosts == 1) {
      const auto host = request[http::field::host];
      if (!healthHostAllowed(std::string_view(host.data(), host.size()), server_->boundAddress(),
                             server_->options().hostNames)) {
        return answer(http::status::misdirected_request,
                      errorJson("the Host header names no address or name of this server"), head);
      }
    }
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const bool metrics = path == kMetricsPath && server_->servesMetrics();
    if (path != kHealthPath && !metrics) {
      return answer(http::status::not_found,
                    errorJson(server_->servesMetrics() ? "not found: ask for /healthz or /metrics"
                                                       : "not found: ask for /healthz"),
                    false);
    }
    if (request.method() != http::verb::get && !head) {
      return answer(http::status::method_not_allowed,
                    errorJson("method not allowed: use GET or HEAD"), head);
    }
    if (metrics) {
      std::string text;
      try {
        text = server_->metrics();
      } catch (const std::exception&) {
        return answer(http::status::internal_server_error, errorJson("the metrics failed"), head);
      }
      return answer(http::status::ok, std::move(text), head, kMetricsText);
    }
    HealthReport report;
    try {
      report = server_->report();
    } catch (const std::exception&) {
      // A callback that throws is a bug of its own; the probe sees a failure, the loop goes on.
      return answer(http::status::internal_server_error, errorJson("the health report failed"),
                    head);
    }
    answer(report.healthy ? http::status::ok : http::status::service_unavailable,
           std::move(report.json), head);
  }

  void answer(http::status status, std::string body, bool head,
              std::string_view contentType = kJson) {
    response_.emplace(status, 11);
    response_->set(http::field::server, "ddprun");
    response_->set(http::field::content_type,
                   beast::string_view(contentType.data(), contentType.size()));
    // A probe's answer is of its moment.
    response_->set(http::field::cache_control, "no-store");
    if (status == http::status::method_not_allowed) response_->set(http::field::allow, "GET, HEAD");
    response_->keep_alive(false);
    response_->content_length(body.size());  // HEAD too: the length GET would send
    if (!head) response_->body() = std::move(body);
    // The answer has as long as the request had: a client that sends and then stops reading is
    // dropped as well.
    stream_.expires_after(server_->options().requestDeadline);
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code, std::size_t) {
                        boost::system::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                        self->close();
                      });
  }

  std::shared_ptr<Impl> server_;
  const asio::ip::address source_;
  std::optional<Sessions::iterator> place_;  // in the server's list; none once closed
  bool reading_ = true;                      // no whole request yet: may be closed for room
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  std::optional<http::response<http::string_body>> response_;
};

void HealthServer::Impl::accept() {
  acceptor_.async_accept(
      [self = shared_from_this()](boost::system::error_code error, tcp::socket socket) {
        if (self->closed_) return;
        if (error) {
          self->retry_.expires_after(kAcceptRetry);
          self->retry_.async_wait([self](boost::system::error_code waitError) {
            if (!waitError && !self->closed_) self->accept();
          });
          return;
        }
        self->admit(std::move(socket));
        self->accept();
      });
}

void HealthServer::Impl::admit(tcp::socket socket) {
  boost::system::error_code error;
  const tcp::endpoint peer = socket.remote_endpoint(error);
  if (error) return;  // gone already; `socket` closes here
  const asio::ip::address source = plain(peer.address());
  if (!makeRoom(source)) return;  // every connection is being answered: `socket` closes here
  auto session = std::make_shared<Session>(shared_from_this(), std::move(socket), source);
  session->list(sessions_.insert(sessions_.end(), session.get()));
  session->start();
}

bool HealthServer::Impl::makeRoom(const asio::ip::address& source) {
  const auto fromSource = static_cast<std::size_t>(
      std::count_if(sessions_.begin(), sessions_.end(),
                    [&](const Session* session) { return session->source() == source; }));
  if (fromSource >= options_.maxPerSource) return evictOldestReading(source);
  if (sessions_.size() >= options_.maxConnections) return evictOldestReading(std::nullopt);
  return true;
}

bool HealthServer::Impl::evictOldestReading(const std::optional<asio::ip::address>& source) {
  const auto oldest = std::find_if(sessions_.begin(), sessions_.end(), [&](const Session* session) {
    return session->reading() && (!source || session->source() == *source);
  });
  if (oldest == sessions_.end()) return false;
  (*oldest)->close();
  return true;
}

void HealthServer::Impl::closeSessions() {
  // close() removes a session from the list: take them one at a time from the front.
  while (!sessions_.empty()) sessions_.front()->close();
}

HealthServer::HealthServer(asio::io_context& io, HealthServerOptions options, Report report,
                           Metrics metrics)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(report), std::move(metrics))) {
  impl_->listen();
}

HealthServer::~HealthServer() { impl_->close(); }

std::uint16_t HealthServer::port() const { return impl_->port(); }
std::string HealthServer::address() const { return impl_->address(); }

}  // namespace ddprun::rendezvous
