// The etcd client's call path. Every call is one POST of a JSON body to a member's v3 gateway.
//
// Fail-over. A call starts at the member that answered the last call and asks the members in
// list order from there. Each attempt gets the time left divided by the members not yet asked
// in this round, and at most options.attemptTimeout, so a member that accepts connections and
// never answers (a stopped process, a cut cable with no reset) or holds a write it will not
// apply (its leader died under it) costs its share, not the whole deadline. A member that cannot be
// reached, breaks the connection, runs out its share, answers something that is not etcd, or
// answers gRPC Unavailable (no leader: every request carries Grpc-Metadata-hasleader: true, so a
// member cut off from its leader says so instead of serving stale data, or a leader change under
// way) passes the call on to the next one. After a round in which every member failed the call
// pauses (100 ms, doubling, at most 1 s) and goes round again, until the deadline: an election
// takes a second or two, and a call made during one should succeed after it. Every other
// answer from etcd (a refusal, not found, compacted, auth) is the cluster's answer and ends
// the call at once.
//
// Writes. A write sent to a member that then failed without a clear answer (a timeout, a broken
// connection, Unavailable after the member proposed it) may still have been applied. Failing it
// over is still right for the write a rendezvous makes (a put of the same value, a delete, a txn
// guarded by revisions, which cannot apply twice), but a txn's failed guard may then be this
// call's own earlier success: TxnResult::afterUncertainAttempt says so, and a failed write
// carries EtcdError::outcomeUnknown().
#include <algorithm>
#include <charconv>
#include <thread>

#include "ddprun/common/shown_key.h"
#include "ddprun/common/text.h"
#include "etcd/client_impl.h"

namespace ddprun::rendezvous::etcd {
namespace {

using wire::json;

// Connections kept open between calls, all members together: the calls a rendezvous makes at
// once (keep-alive, a round's txn, a watch's check) are few.
constexpr std::size_t kMaxIdleConnections = 8;

const char* grpcName(int code) {
  static constexpr const char* kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  return code >= 0 && code <= 16 ? kNames[code] : "?";
}

// The failure's own code, for the code of a call that failed on every member.
EtcdError::Code codeOf(const TransportError& error) {
  return error.timedOut() ? EtcdError::Code::kTimeout : EtcdError::Code::kUnreachable;
}

// Lease revoke and time-to-live moved from /v3beta/kv/lease/... (3.3) to /v3/lease/... (3.4
// keeps the old path as an alias; later releases may not).
std::string pathUnder(const std::string& prefix, const std::string& path) {
  if (prefix == "/v3beta" && (path == "/lease/revoke" || path == "/lease/timetolive")) {
    return prefix + "/kv" + path;
  }
  return prefix + path;
}

// "3.4.23" -> {3, 4}; nothing when it does not start with two numbers.
std::optional<std::pair<int, int>> majorMinor(const std::string& version) {
  int major = 0;
  int minor = 0;
  const char* end = version.data() + version.size();
  auto [p, e] = std::from_chars(version.data(), end, major);
  if (e != std::errc() || p == end || *p != '.') return std::nullopt;
  auto [q, e2] = std::from_chars(p + 1, end, minor);
  if (e2 != std::errc()) return std::nullopt;
  return std::pair{major, minor};
}

}  // namespace

std::string rangeText(const KeyRange& range) {
  if (range.rangeEnd.empty()) return common::shownKey(range.key);
  if (range.rangeEnd == prefixRangeEnd(range.key)) return "prefix " + common::shownKey(range.key);
  return common::shownKey(range.key) + " to " + common::shownKey(range.rangeEnd);
}

std::string jsonText(const json& body) {
  try {
    return body.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    // Only a user name or password can hold text that is not UTF-8: keys and values travel as
    // base64. The text itself is not shown.
    throw EtcdError(EtcdError::Code::kRejected,
                    "etcd: the user name or password is not UTF-8 text, which etcd requires");
  }
}

std::string everyMemberFailed(const EtcdClientOptions& options, const std::string& what,
                              const std::map<std::size_t, std::string>& failures,
                              std::chrono::milliseconds spent) {
  std::string message = "etcd: " + what + " failed";
  if (failures.size() > 1) message += " on every member asked";
  message += " within " + std::to_string(spent.count()) + " ms: ";
  bool first = true;
  for (std::size_t i = 0; i < options.endpoints.size(); ++i) {
    const auto it = failures.find(i);
    if (it == failures.end()) continue;
    message += (first ? "" : "; ") + options.endpoints[i].text() + ": " + it->second;
    first = false;
  }
  if (failures.empty()) message += "the deadline passed before any member was asked";
  return message;
}

// When several members failed differently, the code says the most telling: a member that
// answers "unavailable" says the cluster is there but cannot serve now; one that is not etcd,
// that the endpoint is wrong; a silent one, that the deadline ran out; and unreachable last.
namespace {
int rank(EtcdError::Code code) {
  switch (code) {
    case EtcdError::Code::kUnavailable:
      return 5;
    case EtcdError::Code::kBadResponse:
      return 4;
    case EtcdError::Code::kUnsupported:
      return 3;
    case EtcdError::Code::kTimeout:
      return 2;
    default:
      return 1;
  }
}

}  // namespace

EtcdError::Code mostTelling(const std::map<std::size_t, EtcdError::Code>& codes) {
  EtcdError::Code code = EtcdError::Code::kTimeout;
  int best = 0;
  for (const auto& [endpoint, c] : codes) {
    if (rank(c) > best) {
      best = rank(c);
      code = c;
    }
  }
  return code;
}

bool failsOver(EtcdError::Code code) {
  return code == EtcdError::Code::kUnavailable || code == EtcdError::Code::kBadResponse ||
         code == EtcdError::Code::kUnsupported || code == EtcdError::Code::kTimeout;
}

Deadline attemptEnd(const EtcdClientOptions& options, Clock::time_point now, Deadline deadline,
                    std::size_t membersLeft) {
  const auto share = (deadline - now) / static_cast<int>(std::max<std::size_t>(membersLeft, 1));
  return now + std::min<Clock::duration>(share, options.attemptTimeout);
}

std::chrono::milliseconds roundPause(int round) {
  return std::chrono::milliseconds(std::min(1000, 100 << std::min(round, 4)));
}

EtcdClient::Impl::Impl(EtcdClientOptions o)
    : options(std::move(o)),
      tls(std::any_of(
              options.endpoints.begin(), options.endpoints.end(),
              [](const EtcdEndpoint& e) { return e.scheme == EtcdEndpoint::Scheme::kHttps; })
              ? loadTlsClientContext(options.tls)
              : nullptr),
      prefixes_(options.endpoints.size()),
      answeredAt_(options.endpoints.size()) {
  if (options.endpoints.empty()) {
    throw EtcdError(EtcdError::Code::kRejected, "etcd: no endpoint is given");
  }
  if (options.timeout <= std::chrono::milliseconds(0) ||
      options.attemptTimeout <= std::chrono::milliseconds(0)) {
    throw EtcdError(EtcdError::Code::kRejected, "etcd: the call timeouts must be positive");
  }
}

std::size_t EtcdClient::Impl::preferred() {
  std::lock_guard lock(mutex_);
  return preferred_;
}

void EtcdClient::Impl::answered(std::size_t endpoint) {
  std::lock_guard lock(mutex_);
  preferred_ = endpoint;
}

Clock::time_point EtcdClient::Impl::lastAnswer(std::size_t endpoint) {
  std::lock_guard lock(mutex_);
  return answeredAt_[endpoint];
}

std::unique_ptr<HttpConnection> EtcdClient::Impl::takeConnection(std::size_t endpoint,
                                                                 Deadline deadline) {
  std::unique_ptr<HttpConnection> connection;
  {
    std::lock_guard lock(mutex_);
    for (auto it = idle_.end(); it != idle_.begin();) {
      --it;
      if (it->first != endpoint) continue;
      auto candidate = std::move(it->second);
      it = idle_.erase(it);
      if (candidate->reusable()) {
        connection = std::move(candidate);
        break;
      }
    }
  }
  if (!connection)
    connection = std::make_unique<HttpConnection>(options.endpoints[endpoint], tls, deadline);
  return connection;
}

void EtcdClient::Impl::giveBack(std::size_t endpoint, std::unique_ptr<HttpConnection> connection) {
  if (!connection->reusable()) return;
  std::lock_guard lock(mutex_);
  if (idle_.size() >= kMaxIdleConnections) idle_.erase(idle_.begin());
  idle_.emplace_back(endpoint, std::move(connection));
}

std::optional<EtcdError> EtcdClient::Impl::errorOf(std::size_t, const HttpResponse& response,
                                                   json& parsed) const {
  parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return EtcdError(EtcdError::Code::kBadResponse,
                     "answered HTTP " + std::to_string(response.status) + " '" +
                         common::printablePrefix(response.body, 120) +
                         "', not etcd's JSON (is this etcd's client port?)");
  }
  std::optional<wire::GatewayError> error;
  try {
    error = wire::gatewayError(parsed);
  } catch (const EtcdError& e) {
    return e;
  }
  if (error) {
    return EtcdError(wire::codeForGrpc(error->grpcCode),
                     "etcd said '" + common::printablePrefix(error->message) + "' (gRPC " +
                         std::to_string(error->grpcCode) + " " + grpcName(error->grpcCode) + ")",
                     error->grpcCode);
  }
  if (response.status != 200) {
    return EtcdError(EtcdError::Code::kBadResponse,
                     "answered HTTP " + std::to_string(response.status) + " with no etcd error");
  }
  return std::nullopt;
}

std::string EtcdClient::Impl::apiPrefix(std::size_t endpoint, HttpConnection& connection,
                                        Deadline deadline) {
  {
    std::lock_guard lock(mutex_);
    if (!prefixes_[endpoint].empty()) return prefixes_[endpoint];
  }
  // GET /version: {"etcdserver":"3.4.23","etcdcluster":"3.4.0"}. The gateway moved from
  // /v3alpha (3.2) to /v3beta (3.3) to /v3 (3.4, which keeps /v3beta; 3.5 has only /v3).
  const HttpResponse response = connection.exchange(false, "/version", {}, {}, deadline);
  json parsed = json::parse(response.body, nullptr, false);
  std::string version;
  if (response.status == 200 && parsed.is_object() && parsed.contains("etcdserver") &&
      parsed["etcdserver"].is_string()) {
    version = parsed["etcdserver"].get<std::string>();
  }
  const auto number = majorMinor(version);
  if (!number) {
    throw EtcdError(
        EtcdError::Code::kBadResponse,
        "answers GET /version with HTTP " + std::to_string(response.status) + " '" +
            common::printablePrefix(response.body, 120) +
            "', which is not etcd (is this etcd's client port, 2379, not its peer port?)");
  }
  std::string prefix;
  if (number->first > 3 || (number->first == 3 && number->second >= 4)) {
    prefix = "/v3";
  } else if (*number == std::pair{3, 3}) {
    prefix = "/v3beta";
  } else {
    throw EtcdError(EtcdError::Code::kUnsupported,
                    "runs etcd " + common::printablePrefix(version, 40) +
                        ", whose v3 JSON gateway this client does not speak (etcd 3.3 or later)");
  }
  std::lock_guard lock(mutex_);
  prefixes_[endpoint] = prefix;
  return prefix;
}

std::string EtcdClient::Impl::authenticate(std::size_t endpoint, HttpConnection& connection,
                                           Deadline deadline) {
  const std::string prefix = apiPrefix(endpoint, connection, deadline);
  const json body = {{"name", options.credentials->user},
                     {"password", options.credentials->password}};
  const HttpResponse response =
      connection.exchange(true, prefix + "/auth/authenticate", jsonText(body),
                          {{"Grpc-Metadata-hasleader", "true"}}, deadline);
  json parsed;
  if (auto error = errorOf(endpoint, response, parsed)) {
    // Unavailable and the like fail over as for any call; any other answer is about the
    // credentials (etcd answers a wrong password with InvalidArgument, "authentication failed,
    // invalid user ID or password", and credentials for an etcd without auth with
    // FailedPrecondition, "authentication is not enabled").
    if (failsOver(error->code())) throw *error;
    throw EtcdError(EtcdError::Code::kAuth,
                    "authenticating as '" + common::printablePrefix(options.credentials->user) +
                        "': " + error->what(),
                    error->grpcCode());
  }
  std::string token = wire::stringField(parsed, "token");
  if (token.empty()) {
    throw EtcdError(EtcdError::Code::kBadResponse, "answered the authentication with no token");
  }
  return token;
}

HttpHeaders EtcdClient::Impl::headers(std::size_t endpoint, HttpConnection& connection,
                                      Deadline deadline, bool renew) {
  // clientv3's WithRequireLeader, through the gateway: grpc-gateway passes Grpc-Metadata-*
  // headers on as gRPC metadata, and etcd then refuses (Unavailable, "no leader") what a member
  // without a leader would otherwise serve from its own, possibly stale, copy. docs/etcd.md
  // says what was seen against etcd 3.4.
  HttpHeaders out = {{"Grpc-Metadata-hasleader", "true"}};
  if (!options.credentials) return out;
  std::string token;
  {
    std::lock_guard lock(mutex_);
    token = token_;
  }
  if (token.empty() || renew) {
    // One authentication at a time: the calls that found the token missing or refused together
    // (a read's transactions go several at once) take the first one's new token instead of each
    // asking etcd, a bcrypt check and a raft request apiece. A call that cannot have the turn by
    // its deadline authenticates on its own. Outside mutex_: other calls go on meanwhile.
    std::unique_lock turn(authenticating_, std::defer_lock);
    (void)turn.try_lock_until(deadline);
    std::string current;
    {
      std::lock_guard lock(mutex_);
      current = token_;
    }
    if (turn.owns_lock() && !current.empty() && current != token) {
      token = current;  // another call authenticated while this one waited for its turn
    } else {
      token = authenticate(endpoint, connection, deadline);
      std::lock_guard lock(mutex_);
      token_ = token;
    }
  }
  // The token as it is, no "Bearer": etcd reads the gateway's "authorization" metadata as the
  // token itself.
  out.emplace_back("Authorization", token);
  return out;
}

json EtcdClient::Impl::attempt(std::size_t endpoint, const std::string& path,
                               const std::string& body, Deadline deadline) {
  auto connection = takeConnection(endpoint, deadline);
  bool renew = false;
  for (;;) {
    std::string target;
    HttpHeaders requestHeaders;
    try {
      target = pathUnder(apiPrefix(endpoint, *connection, deadline), path);
      requestHeaders = headers(endpoint, *connection, deadline, renew);
    } catch (const TransportError& error) {
      // Only the version probe or the authentication went out, not this call's request: for
      // the call, nothing was sent.
      throw TransportError(TransportError::Stage::kConnect, error.timedOut(), error.what());
    }
    const HttpResponse response =
        connection->exchange(true, target, body, requestHeaders, deadline);
    json parsed;
    auto error = errorOf(endpoint, response, parsed);
    if (!error) {
      {
        std::lock_guard lock(mutex_);
        answeredAt_[endpoint] = Clock::now();
      }
      giveBack(endpoint, std::move(connection));
      return parsed;
    }
    // Unauthenticated is etcd's answer to a token it no longer knows (simple tokens lapse after
    // --auth-token-ttl, 300 s, of disuse; a restarted member knows none): one new token, one
    // more try. etcd checks the token before it does anything, so the request was not applied.
    if (error->grpcCode() == 16 && options.credentials && !renew) {
      renew = true;
      continue;
    }
    giveBack(endpoint, std::move(connection));
    throw *error;
  }
}

EtcdClient::Impl::Answer EtcdClient::Impl::call(const std::string& what, const std::string& path,
                                                const json& body, Deadline deadline, Effect effect,
                                                std::optional<std::size_t> onlyEndpoint) {
  const auto started = Clock::now();
  const std::string text = jsonText(body);
  const std::size_t members = options.endpoints.size();
  const std::size_t perRound = onlyEndpoint ? 1 : members;
  std::map<std::size_t, std::string> failures;
  std::map<std::size_t, EtcdError::Code> codes;
  bool uncertain = false;
  int grpcCode = -1;
  for (int round = 0;; ++round) {
    const std::size_t first = onlyEndpoint ? *onlyEndpoint : preferred();
    for (std::size_t i = 0; i < perRound; ++i) {
      const auto now = Clock::now();
      if (now >= deadline) break;
      const std::size_t endpoint = (first + i) % members;
      const Deadline attemptDeadline = attemptEnd(options, now, deadline, perRound - i);
      try {
        json answer = attempt(endpoint, path, text, attemptDeadline);
        if (!onlyEndpoint) answered(endpoint);
        return {std::move(answer), uncertain};
      } catch (const TransportError& error) {
        failures[endpoint] = error.what();
        codes[endpoint] = codeOf(error);
        if (error.stage() == TransportError::Stage::kExchange && effect == Effect::kWrite)
          uncertain = true;
      } catch (const EtcdError& error) {
        if (!failsOver(error.code())) {
          // The cluster's answer: the call ends here.
          throw EtcdError(
              error.code(),
              "etcd: " + what + ": " + options.endpoints[endpoint].text() + " " + error.what(),
              error.grpcCode(), error.compactRevision(), uncertain);
        }
        failures[endpoint] = error.what();
        codes[endpoint] = error.code();
        if (error.grpcCode() >= 0) grpcCode = error.grpcCode();
        // An Unavailable after proposing ("leader changed", "request timed out") may still
        // commit; a bad answer may come after the member applied the write.
        if (effect == Effect::kWrite && error.code() != EtcdError::Code::kUnsupported)
          uncertain = true;
      }
    }
    const auto now = Clock::now();
    // Members that are not etcd will not become etcd: no second round for them.
    const bool hopeless =
        !codes.empty() && std::all_of(codes.begin(), codes.end(), [](const auto& c) {
          return c.second == EtcdError::Code::kBadResponse ||
                 c.second == EtcdError::Code::kUnsupported;
        });
    // One member asked by name (a status) gets one attempt: the caller wants that member's word.
    if (now >= deadline || hopeless || onlyEndpoint) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(roundPause(round), deadline - now));
  }
  const EtcdError::Code code = mostTelling(codes);
  throw EtcdError(code,
                  everyMemberFailed(options, what, failures,
                                    std::chrono::duration_cast<std::chrono::milliseconds>(
                                        Clock::now() - started)),
                  code == EtcdError::Code::kUnavailable ? grpcCode : -1, 0, uncertain);
}

// --- the public face ---

EtcdClient::EtcdClient(EtcdClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {}

EtcdClient::~EtcdClient() = default;

const EtcdClientOptions& EtcdClient::options() const { return impl_->options; }

namespace {
Deadline deadlineOf(const EtcdClientOptions& options, std::optional<Deadline> deadline) {
  return deadline ? *deadline : Clock::now() + options.timeout;
}

// An answer read into its type, with the call named when the answer does not read.
template <typename Parse>
auto parsed(const std::string& what, Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const EtcdError& error) {
    if (error.code() != EtcdError::Code::kBadResponse) throw;
    throw EtcdError(error.code(), "etcd: " + what + ": the answer's " + error.what());
  }
}
}  // namespace

RangeResult EtcdClient::range(const RangeRequest& request, std::optional<Deadline> deadline) {
  const std::string what = "range " + rangeText(request.range);
  auto answer = impl_->call(what, "/kv/range", wire::rangeBody(request),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kRead);
  return parsed(what, [&] { return wire::parseRange(answer.body); });
}

std::optional<KeyValue> EtcdClient::get(const std::string& key, std::optional<Deadline> deadline) {
  RangeResult result = range(RangeRequest{KeyRange::single(key)}, deadline);
  if (result.kvs.empty()) return std::nullopt;
  return std::move(result.kvs.front());
}

PutResult EtcdClient::put(const PutRequest& request, std::optional<Deadline> deadline) {
  const std::string what = "put " + common::shownKey(request.key);
  auto answer = impl_->call(what, "/kv/put", wire::putBody(request),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kWrite);
  PutResult result = parsed(what, [&] { return wire::parsePut(answer.body); });
  result.afterUncertainAttempt = answer.afterUncertainAttempt;
  return result;
}

DeleteResult EtcdClient::deleteRange(const DeleteRequest& request,
                                     std::optional<Deadline> deadline) {
  const std::string what = "delete " + rangeText(request.range);
  auto answer = impl_->call(what, "/kv/deleterange", wire::deleteBody(request),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kWrite);
  DeleteResult result = parsed(what, [&] { return wire::parseDelete(answer.body); });
  result.afterUncertainAttempt = answer.afterUncertainAttempt;
  return result;
}

TxnResult EtcdClient::txn(const Txn& txn, std::optional<Deadline> deadline) {
  std::string what = "txn";
  if (!txn.compares.empty()) what += " on " + common::shownKey(txn.compares.front().key);
  if (txn.compares.size() > 1) what += " and " + std::to_string(txn.compares.size() - 1) + " more";
  auto answer = impl_->call(what, "/kv/txn", wire::txnBody(txn),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kWrite);
  TxnResult result = parsed(what, [&] { return wire::parseTxn(answer.body); });
  result.afterUncertainAttempt = answer.afterUncertainAttempt;
  return result;
}

void EtcdClient::compact(Revision revision, std::optional<Deadline> deadline) {
  impl_->call("compact to revision " + std::to_string(revision), "/kv/compaction",
              json{{"revision", std::to_string(revision)}}, deadlineOf(impl_->options, deadline),
              Impl::Effect::kWrite);
}

LeaseGrant EtcdClient::grantLease(std::int64_t ttlSeconds, std::optional<Deadline> deadline) {
  // A grant failed over after an uncertain attempt may leave a lease nobody holds: it expires
  // by itself after its TTL, with no key bound to it.
  const std::string what = "lease grant (TTL " + std::to_string(ttlSeconds) + " s)";
  auto answer = impl_->call(what, "/lease/grant", json{{"TTL", std::to_string(ttlSeconds)}},
                            deadlineOf(impl_->options, deadline), Impl::Effect::kWrite);
  return parsed(what, [&] { return wire::parseLeaseGrant(answer.body); });
}

LeaseKeepAlive EtcdClient::keepAliveOnce(LeaseId lease, std::optional<Deadline> deadline) {
  // A renewal repeated on another member only renews again: a read, as far as fail-over goes.
  const std::string what = "keep-alive of lease " + std::to_string(lease);
  auto answer = impl_->call(what, "/lease/keepalive", wire::leaseIdBody(lease),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kRead);
  // The keep-alive is a stream call: its one answer is {"result": ...}, and an error the stream
  // ends with is {"error": {...}}, which call() has turned into an EtcdError already.
  return parsed(what, [&] { return wire::parseKeepAlive(answer.body); });
}

void EtcdClient::revokeLease(LeaseId lease, std::optional<Deadline> deadline) {
  try {
    impl_->call("revoke of lease " + std::to_string(lease), "/lease/revoke",
                wire::leaseIdBody(lease), deadlineOf(impl_->options, deadline),
                Impl::Effect::kWrite);
  } catch (const EtcdError& error) {
    // Not found after an attempt that may have applied: that attempt revoked it.
    if (error.code() == EtcdError::Code::kNotFound && error.outcomeUnknown()) return;
    throw;
  }
}

LeaseTimeToLive EtcdClient::leaseTimeToLive(LeaseId lease, bool withKeys,
                                            std::optional<Deadline> deadline) {
  json body = wire::leaseIdBody(lease);
  if (withKeys) body["keys"] = true;
  const std::string what = "time-to-live of lease " + std::to_string(lease);
  auto answer = impl_->call(what, "/lease/timetolive", body, deadlineOf(impl_->options, deadline),
                            Impl::Effect::kRead);
  return parsed(what, [&] { return wire::parseTimeToLive(answer.body); });
}

MemberStatus EtcdClient::memberStatus(std::size_t endpoint, std::optional<Deadline> deadline) {
  if (endpoint >= impl_->options.endpoints.size()) {
    throw EtcdError(EtcdError::Code::kRejected, "etcd: no endpoint " + std::to_string(endpoint));
  }
  auto answer = impl_->call("status", "/maintenance/status", json::object(),
                            deadlineOf(impl_->options, deadline), Impl::Effect::kRead, endpoint);
  return parsed("status", [&] { return wire::parseStatus(answer.body); });
}

}  // namespace ddprun::rendezvous::etcd
