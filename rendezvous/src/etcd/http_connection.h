// One HTTP/1.1 connection to one etcd member (plain or TLS), made with Boost.Beast over
// Boost.Asio, every step bounded by a deadline. The etcd client pools these for unary calls;
// a watch keeps one for its stream.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::rendezvous::etcd {

// A connection failed. stage() says whether the request may have reached the member: a failure
// while connecting (resolving, TCP, TLS handshake) sent nothing; one later may have.
class TransportError : public std::runtime_error {
 public:
  enum class Stage { kConnect, kExchange };
  TransportError(Stage stage, bool timedOut, const std::string& message)
      : std::runtime_error(message), stage_(stage), timedOut_(timedOut) {}
  Stage stage() const { return stage_; }
  bool timedOut() const { return timedOut_; }

 private:
  Stage stage_;
  bool timedOut_;
};

// The TLS settings of every https connection of one client, loaded once.
class TlsClientContext;
// Throws EtcdError(kRejected) naming the file that cannot be used.
std::shared_ptr<TlsClientContext> loadTlsClientContext(const EtcdTlsFiles& files);

struct HttpResponse {
  unsigned status = 0;
  std::string body;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Not thread-safe: one call at a time.
class HttpConnection {
 public:
  // Resolves, connects and (https) completes the TLS handshake, verifying the member's
  // certificate for endpoint.host. Throws TransportError(kConnect).
  HttpConnection(const EtcdEndpoint& endpoint, std::shared_ptr<TlsClientContext> tls,
                 Deadline deadline);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  const EtcdEndpoint& endpoint() const;

  // A request and its whole response (at most 64 MiB). `body` empty with GET. Throws
  // TransportError(kExchange); the connection is unusable afterwards.
  HttpResponse exchange(bool post, std::string_view target, std::string body,
                        const HttpHeaders& headers, Deadline deadline);

  // A request whose response body streams (a watch). Returns the status once the response's
  // header is in; for a status other than 200 the whole (bounded) body goes to `errorBody`.
  unsigned startStream(std::string_view target, std::string body, const HttpHeaders& headers,
                       Deadline deadline, std::string& errorBody);
  // The body bytes that arrived by the deadline, "" when none did. The stream stays open across
  // calls (a read still waiting when the deadline passes is carried over, not cancelled).
  // Throws TransportError(kExchange) when the stream ended or broke.
  std::string readStream(Deadline deadline);

  // No byte and no close is waiting on an idle connection: it can carry the next request. A
  // member that closed it (a restart) would otherwise fail that request after it was sent.
  bool reusable();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous::etcd
