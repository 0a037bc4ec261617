// The client's shared state and its one call path, for etcd_client.cc and etcd_watch.cc. A
// watch keeps a reference, so it stays usable whatever the order the two are destroyed in.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/rendezvous/etcd_client.h"
#include "etcd/http_connection.h"
#include "etcd/json_wire.h"

namespace ddprun::rendezvous::etcd {

struct EtcdClient::Impl {
  explicit Impl(EtcdClientOptions options);

  // What a call is, for its fail-over: a write that was sent and got no clear answer may have
  // applied, which a later success must say.
  enum class Effect { kRead, kWrite };

  struct Answer {
    wire::json body;
    bool afterUncertainAttempt = false;
  };

  // POSTs `body` to `path` (under the member's API prefix: "/kv/range") on the members in
  // turn, from the one that answered last, in rounds with a short back-off until one answers or
  // the deadline passes (module comment of etcd_client.cc). `what` names the call in messages.
  // `onlyEndpoint` asks one member, with no fail-over.
  Answer call(const std::string& what, const std::string& path, const wire::json& body,
              Deadline deadline, Effect effect, std::optional<std::size_t> onlyEndpoint = {});

  // One attempt on one member: a pooled connection (or a new one), the version probe and the
  // token when needed, the request, and its answer or error (EtcdError; TransportError).
  wire::json attempt(std::size_t endpoint, const std::string& path, const std::string& body,
                     Deadline deadline);

  // The member's API prefix ("/v3" or "/v3beta"), probed over `connection` the first time.
  std::string apiPrefix(std::size_t endpoint, HttpConnection& connection, Deadline deadline);
  // The headers every request carries: hasleader, and the token when there are credentials
  // (authenticating over `connection` when there is none yet, or `renew`ing it).
  HttpHeaders headers(std::size_t endpoint, HttpConnection& connection, Deadline deadline,
                      bool renew);
  // The error an answer holds (a gateway error, a status other than 200, a body that is not
  // JSON), as an EtcdError naming the member; nothing for a good answer.
  std::optional<EtcdError> errorOf(std::size_t endpoint, const HttpResponse& response,
                                   wire::json& parsed) const;

  std::unique_ptr<HttpConnection> takeConnection(std::size_t endpoint, Deadline deadline);
  void giveBack(std::size_t endpoint, std::unique_ptr<HttpConnection> connection);

  std::size_t preferred();
  void answered(std::size_t endpoint);
  // When `endpoint` last answered a request of this client (every request asks for a leader:
  // the member was there and had one then); the epoch when never. A silent watch on that member
  // counts it as heard from (etcd_watch.cc).
  Clock::time_point lastAnswer(std::size_t endpoint);

  const EtcdClientOptions options;
  const std::shared_ptr<TlsClientContext> tls;

 private:
  std::string authenticate(std::size_t endpoint, HttpConnection& connection, Deadline deadline);

  std::mutex mutex_;
  std::size_t preferred_ = 0;
  std::vector<std::string> prefixes_;          // per endpoint; empty until probed
  std::vector<Clock::time_point> answeredAt_;  // per endpoint: lastAnswer()
  std::vector<std::pair<std::size_t, std::unique_ptr<HttpConnection>>> idle_;
  std::string token_;                // never logged
  std::timed_mutex authenticating_;  // one authentication at a time (headers())
};

// "etcd: <what> failed on every member after N ms: <endpoint>: <its failure>; ...". `failures`
// maps an endpoint's index to its last failure.
std::string everyMemberFailed(const EtcdClientOptions& options, const std::string& what,
                              const std::map<std::size_t, std::string>& failures,
                              std::chrono::milliseconds spent);

// When several members failed differently, the code of the call says the most telling: a
// member that answers "unavailable" says the cluster is there but cannot serve now; one that is
// not etcd, that the endpoint is wrong; a silent one, that the deadline ran out; unreachable
// last. kTimeout when `codes` is empty (no member was asked before the deadline).
EtcdError::Code mostTelling(const std::map<std::size_t, EtcdError::Code>& codes);

// The failures a call passes on to the next member (others are the cluster's answer).
bool failsOver(EtcdError::Code code);

// A range for messages: "'key'", "prefix 'p/'", "'a' to 'b'" (escaped, cut).
std::string rangeText(const KeyRange& range);

// `body` as JSON text; EtcdError(kRejected) for text that is not UTF-8.
std::string jsonText(const wire::json& body);

// When an attempt on one member ends: its share of the time left (divided by the members not
// yet asked in this round), at most options.attemptTimeout.
Deadline attemptEnd(const EtcdClientOptions& options, Clock::time_point now, Deadline deadline,
                    std::size_t membersLeft);

// The pause between two rounds over every member: 100 ms, doubling, at most 1 s.
std::chrono::milliseconds roundPause(int round);

}  // namespace ddprun::rendezvous::etcd
