#include "ddprun/rendezvous/health_server.h"

#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace ddprun::rendezvous {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::string_view kPath = "/healthz";
// After an accept error (out of descriptors, say) the listener waits this long before it accepts
// again, rather than spinning on the same error.
constexpr std::chrono::milliseconds kAcceptRetry{100};

std::string errorJson(std::string_view what) { return fmt::format("{{\"error\": \"{}\"}}", what); }

}  // namespace

class HealthServer::Impl : public std::enable_shared_from_this<HealthServer::Impl> {
 public:
  class Session;

  Impl(asio::io_context& io, HealthServerOptions options, Report report)
      : io_(io),
        options_(std::move(options)),
        report_(std::move(report)),
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
  bool closed() const { return closed_; }
  HealthReport report() const { return report_(); }
  void forget(Session* session) { sessions_.erase(session); }

 private:
  void accept();
  void closeSessions();

  asio::io_context& io_;
  HealthServerOptions options_;
  Report report_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  tcp::endpoint bound_;
  bool closed_ = false;
  std::unordered_set<Session*> sessions_;  // open now; each removes itself as it ends
};

// One connection: read one request (header bounded, no body, under the read deadline), answer
// it, close. Owned by its pending operations (shared_ptr); the server knows it only to close it.
class HealthServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Impl> server, tcp::socket socket)
      : server_(std::move(server)),
        stream_(std::move(socket)),
        // The header's limit is enforced by the parser; the buffer is only sized for it.
        buffer_(server_->options().maxHeaderBytes + 1024) {
    parser_.header_limit(static_cast<std::uint32_t>(server_->options().maxHeaderBytes));
  }
  ~Session() { server_->forget(this); }

  void start() {
    stream_.expires_after(server_->options().readTimeout);
    http::async_read(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code error, std::size_t) { self->onRead(error); });
  }

  void close() {
    boost::system::error_code ignored;
    stream_.socket().close(ignored);
  }

 private:
  void onRead(beast::error_code error) {
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
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path != kPath)
      return answer(http::status::not_found, errorJson("not found: ask for /healthz"), false);
    const bool head = request.method() == http::verb::head;
    if (request.method() != http::verb::get && !head) {
      return answer(http::status::method_not_allowed,
                    errorJson("method not allowed: use GET or HEAD"), head);
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

  void answer(http::status status, std::string body, bool head) {
    response_.emplace(status, 11);
    response_->set(http::field::server, "ddprun");
    response_->set(http::field::content_type, "application/json");
    // A probe's answer is of its moment.
    response_->set(http::field::cache_control, "no-store");
    if (status == http::status::method_not_allowed) response_->set(http::field::allow, "GET, HEAD");
    response_->keep_alive(false);
    response_->content_length(body.size());  // HEAD too: the length GET would send
    if (!head) response_->body() = std::move(body);
    // The answer is bounded by the same deadline as the request: a client that sends and then
    // stops reading is dropped as well.
    stream_.expires_after(server_->options().readTimeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code, std::size_t) {
                        boost::system::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                        self->close();
                      });
  }

  std::shared_ptr<Impl> server_;
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
        if (self->sessions_.size() < self->options_.maxConnections) {
          auto session = std::make_shared<Session>(self, std::move(socket));
          self->sessions_.insert(session.get());
          session->start();
        }  // else: over the cap, `socket` closes here, unanswered
        self->accept();
      });
}

void HealthServer::Impl::closeSessions() {
  // close() may end a session's last operation, which removes it from the set: iterate a copy.
  const std::unordered_set<Session*> open = sessions_;
  for (Session* session : open) session->close();
}

HealthServer::HealthServer(asio::io_context& io, HealthServerOptions options, Report report)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(report))) {
  impl_->listen();
}

HealthServer::~HealthServer() { impl_->close(); }

std::uint16_t HealthServer::port() const { return impl_->port(); }
std::string HealthServer::address() const { return impl_->address(); }

}  // namespace ddprun::rendezvous
