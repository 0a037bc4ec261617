// An etcd v3 client over etcd's JSON gateway (POST /v3/..., docs/etcd.md): key-value reads and
// writes, transactions, leases and watches, with a deadline on every call, fail-over between the
// listed members, and a member without a leader treated as unavailable (never served stale).
// The foundation of the etcd rendezvous backend (issue #20); it knows nothing of rendezvous.
//
// Keys and values are bytes (std::string); revisions, versions and lease ids are int64, as etcd
// has them. Every failure is an EtcdError whose code() says what kind it is.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ddprun::rendezvous::etcd {

using Revision = std::int64_t;
using LeaseId = std::int64_t;
using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline constexpr std::uint16_t kDefaultEtcdPort = 2379;

// One member's client URL.
struct EtcdEndpoint {
  enum class Scheme { kHttp, kHttps };
  Scheme scheme = Scheme::kHttp;
  std::string host;  // a name, an IPv4 address, or an IPv6 address (without brackets)
  std::uint16_t port = kDefaultEtcdPort;

  // "http://127.0.0.1:2379", "https://[::1]:2379": for messages.
  std::string text() const;
  bool operator==(const EtcdEndpoint&) const = default;
};

// A list of endpoints that cannot be used: what() is one line naming the entry and the fix.
class EtcdEndpointError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// "host:port[,host:port...]": each entry may start with http:// or https://, the port defaults
// to 2379, an IPv6 address is written in brackets ("[::1]:2379"). Throws EtcdEndpointError.
std::vector<EtcdEndpoint> parseEtcdEndpoints(std::string_view text);

// Every failure of the client. Decide on code() (and grpcCode() for finer cases), never on what().
class EtcdError : public std::runtime_error {
 public:
  enum class Code {
    kUnreachable,  // no listed member could be connected to, or each connection broke
    kUnavailable,  // a member answered gRPC Unavailable: no leader, a leader change, its own
                   // request timeout (the cluster may be fine again in a moment)
    kTimeout,      // the call's deadline passed
    kCompacted,    // the revision asked for was compacted (compactRevision() when etcd said it)
    kAuth,         // authentication failed, or the user may not do this
    kNotFound,     // the lease (or user) does not exist: a lease that expired is not found
    kRejected,     // etcd refused the request as it is: too large, too many operations, no
                   // space left, an invalid argument. Repeating it will fail again
    kBadResponse,  // something answered that is not an etcd v3 gateway as this client knows it
    kUnsupported,  // the member runs an etcd without a usable v3 gateway (before 3.3)
  };

  EtcdError(Code code, const std::string& message, int grpcCode = -1, Revision compactRevision = 0,
            bool outcomeUnknown = false)
      : std::runtime_error(message),
        code_(code),
        grpcCode_(grpcCode),
        compactRevision_(compactRevision),
        outcomeUnknown_(outcomeUnknown) {}

  Code code() const { return code_; }
  // The gRPC status code etcd answered with (14 Unavailable, 16 Unauthenticated, ...), or -1
  // when the failure is not an answer (unreachable, timeout, bad response).
  int grpcCode() const { return grpcCode_; }
  // kCompacted from a watch: the oldest revision still kept (re-read, then watch from there).
  Revision compactRevision() const { return compactRevision_; }
  // A write that may have been applied although the call failed: it was sent and no answer said
  // whether it took effect (a timeout, a broken connection, Unavailable after proposing).
  bool outcomeUnknown() const { return outcomeUnknown_; }

 private:
  Code code_;
  int grpcCode_;
  Revision compactRevision_;
  bool outcomeUnknown_;
};

// The name of a code, for messages and test output ("unavailable").
std::string_view codeName(EtcdError::Code code);

// What every answer says about where and when it was served.
struct ResponseHeader {
  std::uint64_t clusterId = 0;
  std::uint64_t memberId = 0;
  Revision revision = 0;  // the store's revision when the request was served
  std::uint64_t raftTerm = 0;
};

struct KeyValue {
  std::string key;
  std::string value;
  Revision createRevision = 0;
  Revision modRevision = 0;
  std::int64_t version = 0;  // 1 at creation, +1 on every put; 0: the key does not exist
  LeaseId lease = 0;         // 0: no lease
  bool operator==(const KeyValue&) const = default;
};

// A key, or the keys in [key, rangeEnd).
struct KeyRange {
  std::string key;
  std::string rangeEnd;  // empty: `key` alone

  static KeyRange single(std::string key) { return {std::move(key), {}}; }
  // Every key that starts with `prefix`. An empty prefix (the whole keyspace: an etcd is
  // shared) throws std::invalid_argument.
  static KeyRange prefix(std::string prefix);
};

// The smallest key above every key that starts with `prefix`: the prefix with its last byte
// below 0xff raised by one, the 0xff bytes after it dropped. "\0" (etcd's "to the end") when
// every byte is 0xff. Throws std::invalid_argument for an empty prefix.
std::string prefixRangeEnd(std::string_view prefix);

struct RangeRequest {
  KeyRange range;
  Revision revision = 0;   // 0: the newest
  std::int64_t limit = 0;  // 0: no limit
  bool countOnly = false;
  bool keysOnly = false;
};
struct RangeResult {
  ResponseHeader header;
  std::vector<KeyValue> kvs;  // sorted by key
  std::int64_t count = 0;     // how many keys the range holds (all of them, whatever the limit)
  bool more = false;          // the limit left some out
};

struct PutRequest {
  std::string key;
  std::string value;
  LeaseId lease = 0;    // bind the key to this lease: it is deleted when the lease ends
  bool prevKv = false;  // return the key as it was before
};
struct PutResult {
  ResponseHeader header;
  std::optional<KeyValue> prevKv;
  // As TxnResult's: an earlier attempt may have applied too (the key then has more versions
  // than puts were asked for; prevKv may be this call's own value).
  bool afterUncertainAttempt = false;
};

struct DeleteRequest {
  KeyRange range;
  bool prevKv = false;
};
struct DeleteResult {
  ResponseHeader header;
  std::int64_t deleted = 0;  // after an uncertain attempt, what that attempt left to delete
  std::vector<KeyValue> prevKvs;
  bool afterUncertainAttempt = false;  // as TxnResult's
};

// One comparison of a transaction's guard. Build with the named constructors.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  std::int64_t number = 0;  // the version, revision or lease compared with
  std::string bytes;        // kValue: the value compared with

  static Compare version(std::string key, Result result, std::int64_t version);
  static Compare createRevision(std::string key, Result result, Revision revision);
  static Compare modRevision(std::string key, Result result, Revision revision);
  static Compare value(std::string key, Result result, std::string value);
  static Compare lease(std::string key, Result result, LeaseId lease);
  // The key does not exist: create_revision == 0 (create-if-absent's guard).
  static Compare absent(std::string key) {
    return createRevision(std::move(key), Result::kEqual, 0);
  }
};

using TxnOp = std::variant<PutRequest, RangeRequest, DeleteRequest>;
using TxnOpResult = std::variant<PutResult, RangeResult, DeleteResult>;

// If every compare holds, the success ops run, otherwise the failure ops; atomically.
//   Txn().when(Compare::absent(k)).then(PutRequest{k, v,
//   lease}).otherwise(RangeRequest{KeyRange::single(k)})
struct Txn {
  std::vector<Compare> compares;
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;

  Txn& when(Compare compare) {
    compares.push_back(std::move(compare));
    return *this;
  }
  Txn& then(TxnOp op) {
    success.push_back(std::move(op));
    return *this;
  }
  Txn& otherwise(TxnOp op) {
    failure.push_back(std::move(op));
    return *this;
  }
};
struct TxnResult {
  ResponseHeader header;
  bool succeeded = false;
  std::vector<TxnOpResult> responses;  // one per op of the branch that ran, in order
  // An earlier attempt of this call was sent to another member and got no clear answer (see
  // EtcdError::outcomeUnknown): that attempt may have applied, so a failed guard may be this
  // call's own earlier success. Read the key back before concluding someone else won.
  bool afterUncertainAttempt = false;
};

struct LeaseGrant {
  ResponseHeader header;
  LeaseId id = 0;
  std::int64_t ttlSeconds = 0;  // as granted: etcd raises a TTL below its minimum
};
struct LeaseKeepAlive {
  ResponseHeader header;
  LeaseId id = 0;
  std::int64_t ttlSeconds = 0;  // the lease's TTL, restarted from now
};
struct LeaseTimeToLive {
  ResponseHeader header;
  LeaseId id = 0;
  std::int64_t ttlSeconds = -1;        // seconds left; -1: expired or never granted
  std::int64_t grantedTtlSeconds = 0;  // 0 when expired
  std::vector<std::string> keys;       // the keys bound to it (when asked for)
};

struct WatchRequest {
  KeyRange range;
  Revision startRevision = 0;   // 0: events after now
  bool prevKv = false;          // each event carries the key as it was before
  bool progressNotify = false;  // etcd sends an empty batch when idle (every 10 min by default)
  // A stream silent this long is checked: its member is asked for its status (one request),
  // unless it answered another request of the same client meanwhile (lastHeard()). A member
  // that does not answer, or has no leader, counts as a lost stream (resumed on the next
  // member). Without it a member cut off from this client alone (no reset reaches it) would
  // leave the watch waiting for ever. 0: never checked.
  std::chrono::milliseconds checkAfterSilence{5000};
  // A stream with no message of its own this long is made again from where it was (resumes()
  // counts it), even while its member answers: those answers prove the member, not the stream's
  // own connection, which something between may drop while it is idle (a NAT's or a firewall's
  // idle timeout) without a word to either end. 0: never.
  std::chrono::milliseconds remakeAfterSilence{60000};
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // a delete: the key and the deletion's revision (modRevision) only
  std::optional<KeyValue> prevKv;
};

struct WatchBatch {
  ResponseHeader header;
  std::vector<WatchEvent> events;  // in revision order; empty for a progress notification
};

// A watch on its own connection. next() blocks until events come, at most until its deadline.
// A lost stream (the member died, lost its leader, the connection broke) is re-established by
// the watch itself on the next listed member, from the revision after the last event delivered,
// so no event is lost or delivered twice; resumes() counts that. What the caller must act on
// is thrown: kCompacted (events were lost: re-read, then watch again from compactRevision()) and,
// when no member takes the watch back before the deadline, the members' failures (kUnreachable,
// kUnavailable, kAuth ...); a later next() tries again.
// Not thread-safe: one thread uses a watch at a time. Destroying it closes its connection.
class EtcdWatch {
 public:
  virtual ~EtcdWatch() = default;
  // The next batch of events (or a progress notification); nothing when the deadline passes
  // first.
  virtual std::optional<WatchBatch> next(Deadline deadline) = 0;
  // The revision the watch continues from: one past the last event (or progress) delivered.
  virtual Revision nextRevision() const = 0;
  // How many times the watch was re-established after a lost stream.
  virtual int resumes() const = 0;
  // The endpoint the watch streams from now, for messages.
  virtual std::string endpoint() const = 0;
  // When the stream's member last showed it was there: a message on the stream, an answer to
  // its silence check, or an answer to any other request of the same client (each asks for a
  // leader), such as the keep-alives of a lease held beside the watch. A stream silent for
  // checkAfterSilence past this is checked.
  virtual Clock::time_point lastHeard() const = 0;
};

// A member's own view, from POST /v3/maintenance/status: which member it is and which it takes
// for the leader (0: none).
struct MemberStatus {
  ResponseHeader header;
  std::string version;
  std::uint64_t leader = 0;
  std::uint64_t raftIndex = 0;
  std::int64_t dbSize = 0;
};

struct EtcdCredentials {
  std::string user;
  std::string password;  // never logged, never in a message
};

// The most bytes a password file may hold: a password, not a file that happens to be there.
inline constexpr std::size_t kMaxPasswordFileBytes = 4096;

// `user`'s credentials with the password read from `passwordFile`, for callers that must not take
// a password on a command line (ps shows every argument to every user). Read by the one reader
// of secret files (auth::readPrivateFile: a regular file of this user or root, mode 600, at most
// kMaxPasswordFileBytes); the line ends that end it are dropped (`echo pw > file` writes one).
// Throws EtcdError(kRejected), one line naming the file and the fix: it cannot be read, its mode
// lets others read it ("chmod 600"), it is empty, or it is not UTF-8 text (etcd takes no other).
// The password is in no message.
EtcdCredentials readEtcdCredentials(std::string user, const std::string& passwordFile);

// TLS for https:// endpoints (PEM files). An empty caCertificate uses the system's CAs; the
// certificate and key are the client's own, for members that ask for one (--client-cert-auth).
struct EtcdTlsFiles {
  std::string caCertificate;
  std::string certificate;
  std::string privateKey;
};

struct EtcdClientOptions {
  std::vector<EtcdEndpoint> endpoints;
  // The deadline of a call that is given none: a call, fail-over included, ends within it.
  std::chrono::milliseconds timeout{5000};
  // The most one member gets of a call's time before the call moves on to the next. A healthy
  // member answers in milliseconds; a write sent to a member whose leader just died waits for
  // etcd's own request timeout (7 s with the defaults) and is not applied, so the next member
  // is asked sooner. Twice the election timeout: an election under way ends within it.
  std::chrono::milliseconds attemptTimeout{2000};
  std::optional<EtcdCredentials> credentials;
  EtcdTlsFiles tls;
};

// The client. Thread-safe: calls from several threads run at once, each on a connection of its
// own (idle connections are kept for the next call). Every call blocks until it has an answer
// or its deadline (the given one, else options.timeout from now) passes, and throws EtcdError.
//
// Fail-over: a call starts at the member that answered last; when a member cannot be reached,
// does not answer within its share of the time left (the time left divided by the members not
// yet tried, at most attemptTimeout) or answers Unavailable (no leader: every request carries
// Grpc-Metadata-hasleader: true), the call goes on with the next member. When all fail, the
// error names each member and what it said. A write that failed over after an attempt whose
// outcome is unknown says so (TxnResult::afterUncertainAttempt).
// Auth: with credentials, the client gets a token from /v3/auth/authenticate and sends it in
// every request; a token etcd no longer accepts (gRPC Unauthenticated) is renewed once per call.
class EtcdClient {
 public:
  // No I/O. Throws EtcdError(kRejected) for no endpoints, or TLS files that cannot be loaded.
  explicit EtcdClient(EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdClientOptions& options() const;

  RangeResult range(const RangeRequest& request, std::optional<Deadline> deadline = {});
  // The key, or nothing.
  std::optional<KeyValue> get(const std::string& key, std::optional<Deadline> deadline = {});
  PutResult put(const PutRequest& request, std::optional<Deadline> deadline = {});
  DeleteResult deleteRange(const DeleteRequest& request, std::optional<Deadline> deadline = {});
  TxnResult txn(const Txn& txn, std::optional<Deadline> deadline = {});
  // Drops the history before `revision` (watches from before it are then cancelled, kCompacted).
  void compact(Revision revision, std::optional<Deadline> deadline = {});

  LeaseGrant grantLease(std::int64_t ttlSeconds, std::optional<Deadline> deadline = {});
  // One renewal, one request (the gateway ignores every request after the first on a stream:
  // etcd#8237). Throws kNotFound when the lease has expired.
  LeaseKeepAlive keepAliveOnce(LeaseId lease, std::optional<Deadline> deadline = {});
  // Ends the lease and deletes its keys. Throws kNotFound when it had already ended.
  void revokeLease(LeaseId lease, std::optional<Deadline> deadline = {});
  LeaseTimeToLive leaseTimeToLive(LeaseId lease, bool withKeys = false,
                                  std::optional<Deadline> deadline = {});

  // Starts a watch and returns once etcd has created it (events from then on, or from
  // request.startRevision, will be seen).
  std::unique_ptr<EtcdWatch> watch(const WatchRequest& request,
                                   std::optional<Deadline> deadline = {});

  // One member's status, asked of that member only (no fail-over): `endpoint` indexes
  // options().endpoints.
  MemberStatus memberStatus(std::size_t endpoint, std::optional<Deadline> deadline = {});

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous::etcd
