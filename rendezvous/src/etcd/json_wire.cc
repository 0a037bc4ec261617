#include "etcd/json_wire.h"

#include <charconv>
#include <limits>

#include "ddprun/common/text.h"
#include "etcd/base64.h"

namespace ddprun::rendezvous::etcd::wire {
namespace {

[[noreturn]] void malformed(std::string_view name, const json& value) {
  throw EtcdError(EtcdError::Code::kBadResponse,
                  "field '" + std::string(name) + "' is " +
                      common::printablePrefix(value.dump(-1, ' ', true), 80) +
                      ", not what etcd's gateway writes");
}

// The field, or null when it is absent (a zero value the gateway left out) or null.
const json* find(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename Integer>
Integer integerField(const json& object, std::string_view name) {
  const json* value = find(object, name);
  if (value == nullptr) return 0;
  if (value->is_number_integer()) {
    // nlohmann keeps non-negative numbers as unsigned and negative ones as signed.
    if (value->is_number_unsigned()) {
      const auto n = value->get<std::uint64_t>();
      if (n > static_cast<std::uint64_t>(std::numeric_limits<Integer>::max()))
        malformed(name, *value);
      return static_cast<Integer>(n);
    }
    const auto n = value->get<std::int64_t>();
    if constexpr (std::is_unsigned_v<Integer>) {
      if (n < 0) malformed(name, *value);
    }
    return static_cast<Integer>(n);
  }
  if (!value->is_string()) malformed(name, *value);
  // proto3 JSON writes 64-bit integers as decimal strings: "revision": "42".
  const auto& text = value->get_ref<const std::string&>();
  Integer n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    malformed(name, *value);
  return n;
}

std::string int64Text(std::int64_t n) { return std::to_string(n); }

const char* targetName(Compare::Target target) {
  switch (target) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreateRevision:
      return "CREATE";
    case Compare::Target::kModRevision:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
    case Compare::Target::kLease:
      return "LEASE";
  }
  return "VERSION";
}

const char* resultName(Compare::Result result) {
  switch (result) {
    case Compare::Result::kEqual:
      return "EQUAL";
    case Compare::Result::kGreater:
      return "GREATER";
    case Compare::Result::kLess:
      return "LESS";
    case Compare::Result::kNotEqual:
      return "NOT_EQUAL";
  }
  return "EQUAL";
}

json opBody(const TxnOp& op) {
  if (const auto* put = std::get_if<PutRequest>(&op)) return {{"request_put", putBody(*put)}};
  if (const auto* range = std::get_if<RangeRequest>(&op))
    return {{"request_range", rangeBody(*range)}};
  return {{"request_delete_range", deleteBody(std::get<DeleteRequest>(op))}};
}

std::vector<KeyValue> keyValues(const json& object, std::string_view name) {
  std::vector<KeyValue> kvs;
  const json* list = find(object, name);
  if (list == nullptr) return kvs;
  if (!list->is_array()) malformed(name, *list);
  kvs.reserve(list->size());
  for (const json& kv : *list) kvs.push_back(parseKeyValue(kv));
  return kvs;
}

// The part of a message that is an object: the answer itself, a txn's inner answer, a stream's
// "result". Anything else (an array, a string) is not etcd's.
const json& objectField(const json& object, std::string_view name) {
  static const json kEmpty = json::object();
  const json* value = find(object, name);
  if (value == nullptr) return kEmpty;
  if (!value->is_object()) malformed(name, *value);
  return *value;
}

WatchEvent parseEvent(const json& event) {
  if (!event.is_object()) malformed("events", event);
  WatchEvent out;
  // Event.EventType: PUT = 0 (left out as the zero value), DELETE = 1.
  if (const json* type = find(event, "type")) {
    if (*type == "DELETE" || *type == 1) {
      out.type = WatchEvent::Type::kDelete;
    } else if (!(*type == "PUT" || *type == 0)) {
      malformed("type", *type);
    }
  }
  out.kv = parseKeyValue(objectField(event, "kv"));
  if (find(event, "prev_kv") != nullptr) out.prevKv = parseKeyValue(objectField(event, "prev_kv"));
  return out;
}

}  // namespace

std::int64_t int64Field(const json& object, std::string_view name) {
  return integerField<std::int64_t>(object, name);
}

std::uint64_t uint64Field(const json& object, std::string_view name) {
  return integerField<std::uint64_t>(object, name);
}

bool boolField(const json& object, std::string_view name) {
  const json* value = find(object, name);
  if (value == nullptr) return false;
  if (!value->is_boolean()) malformed(name, *value);
  return value->get<bool>();
}

std::string stringField(const json& object, std::string_view name) {
  const json* value = find(object, name);
  if (value == nullptr) return {};
  if (!value->is_string()) malformed(name, *value);
  return value->get<std::string>();
}

std::string bytesField(const json& object, std::string_view name) {
  const json* value = find(object, name);
  if (value == nullptr) return {};
  if (!value->is_string()) malformed(name, *value);
  auto bytes = base64Decode(value->get_ref<const std::string&>());
  if (!bytes) malformed(name, *value);
  return std::move(*bytes);
}

json rangeBody(const RangeRequest& request) {
  json body = {{"key", base64Encode(request.range.key)}};
  if (!request.range.rangeEnd.empty()) body["range_end"] = base64Encode(request.range.rangeEnd);
  if (request.revision != 0) body["revision"] = int64Text(request.revision);
  if (request.limit != 0) body["limit"] = int64Text(request.limit);
  if (request.countOnly) body["count_only"] = true;
  if (request.keysOnly) body["keys_only"] = true;
  // Never "serializable": a serializable read is served from the member's own copy, which a
  // member cut off from its leader would serve stale. Linearizable reads need the leader.
  return body;
}

json putBody(const PutRequest& request) {
  json body = {{"key", base64Encode(request.key)}, {"value", base64Encode(request.value)}};
  if (request.lease != 0) body["lease"] = int64Text(request.lease);
  if (request.prevKv) body["prev_kv"] = true;
  return body;
}

json deleteBody(const DeleteRequest& request) {
  json body = {{"key", base64Encode(request.range.key)}};
  if (!request.range.rangeEnd.empty()) body["range_end"] = base64Encode(request.range.rangeEnd);
  if (request.prevKv) body["prev_kv"] = true;
  return body;
}

json compareBody(const Compare& compare) {
  json body = {{"key", base64Encode(compare.key)},
               {"target", targetName(compare.target)},
               {"result", resultName(compare.result)}};
  // The compared-with value goes in the field of its target (the proto's oneof). It is written
  // even when 0: "create_revision": "0" is how create-if-absent reads on the wire.
  switch (compare.target) {
    case Compare::Target::kVersion:
      body["version"] = int64Text(compare.number);
      break;
    case Compare::Target::kCreateRevision:
      body["create_revision"] = int64Text(compare.number);
      break;
    case Compare::Target::kModRevision:
      body["mod_revision"] = int64Text(compare.number);
      break;
    case Compare::Target::kValue:
      body["value"] = base64Encode(compare.bytes);
      break;
    case Compare::Target::kLease:
      body["lease"] = int64Text(compare.number);
      break;
  }
  return body;
}

json txnBody(const Txn& txn) {
  json body = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& compare : txn.compares) body["compare"].push_back(compareBody(compare));
  for (const TxnOp& op : txn.success) body["success"].push_back(opBody(op));
  for (const TxnOp& op : txn.failure) body["failure"].push_back(opBody(op));
  return body;
}

json watchCreateBody(const WatchRequest& request) {
  json create = {{"key", base64Encode(request.range.key)}};
  if (!request.range.rangeEnd.empty()) create["range_end"] = base64Encode(request.range.rangeEnd);
  if (request.startRevision != 0) create["start_revision"] = int64Text(request.startRevision);
  if (request.prevKv) create["prev_kv"] = true;
  if (request.progressNotify) create["progress_notify"] = true;
  return {{"create_request", create}};
}

json leaseIdBody(LeaseId lease) { return {{"ID", int64Text(lease)}}; }

ResponseHeader parseHeader(const json& response) {
  const json& header = objectField(response, "header");
  ResponseHeader out;
  out.clusterId = uint64Field(header, "cluster_id");
  out.memberId = uint64Field(header, "member_id");
  out.revision = int64Field(header, "revision");
  out.raftTerm = uint64Field(header, "raft_term");
  return out;
}

KeyValue parseKeyValue(const json& kv) {
  if (!kv.is_object()) malformed("kv", kv);
  KeyValue out;
  out.key = bytesField(kv, "key");
  out.value = bytesField(kv, "value");
  out.createRevision = int64Field(kv, "create_revision");
  out.modRevision = int64Field(kv, "mod_revision");
  out.version = int64Field(kv, "version");
  out.lease = int64Field(kv, "lease");
  return out;
}

RangeResult parseRange(const json& response) {
  RangeResult out;
  out.header = parseHeader(response);
  out.kvs = keyValues(response, "kvs");
  out.count = int64Field(response, "count");
  out.more = boolField(response, "more");
  return out;
}

PutResult parsePut(const json& response) {
  PutResult out;
  out.header = parseHeader(response);
  if (find(response, "prev_kv") != nullptr)
    out.prevKv = parseKeyValue(objectField(response, "prev_kv"));
  return out;
}

DeleteResult parseDelete(const json& response) {
  DeleteResult out;
  out.header = parseHeader(response);
  out.deleted = int64Field(response, "deleted");
  out.prevKvs = keyValues(response, "prev_kvs");
  return out;
}

TxnResult parseTxn(const json& response) {
  TxnResult out;
  out.header = parseHeader(response);
  out.succeeded = boolField(response, "succeeded");
  const json* responses = find(response, "responses");
  if (responses == nullptr) return out;
  if (!responses->is_array()) malformed("responses", *responses);
  for (const json& op : *responses) {
    // ResponseOp is a oneof: exactly one of these. An empty answer (a put with nothing to say)
    // is still written as {"response_put": {"header": ...}}.
    if (find(op, "response_put") != nullptr) {
      out.responses.emplace_back(parsePut(objectField(op, "response_put")));
    } else if (find(op, "response_range") != nullptr) {
      out.responses.emplace_back(parseRange(objectField(op, "response_range")));
    } else if (find(op, "response_delete_range") != nullptr) {
      out.responses.emplace_back(parseDelete(objectField(op, "response_delete_range")));
    } else {
      malformed("responses", op);
    }
  }
  return out;
}

LeaseGrant parseLeaseGrant(const json& response) {
  LeaseGrant out;
  out.header = parseHeader(response);
  out.id = int64Field(response, "ID");
  out.ttlSeconds = int64Field(response, "TTL");
  if (out.id == 0) malformed("ID", find(response, "ID") ? response["ID"] : json("(missing)"));
  return out;
}

LeaseKeepAlive parseKeepAlive(const json& response) {
  // A server-streaming call's message: {"result": {...}} (an error is {"error": {...}} instead,
  // handled before this).
  const json& result = objectField(response, "result");
  LeaseKeepAlive out;
  out.header = parseHeader(result);
  out.id = int64Field(result, "ID");
  out.ttlSeconds = int64Field(result, "TTL");
  if (out.ttlSeconds <= 0) {
    // clientv3's KeepAliveOnce says ErrLeaseNotFound for the same answer.
    throw EtcdError(EtcdError::Code::kNotFound,
                    "lease " + std::to_string(out.id) + " has expired (keep-alive answered no TTL)",
                    5);
  }
  return out;
}

LeaseTimeToLive parseTimeToLive(const json& response) {
  LeaseTimeToLive out;
  out.header = parseHeader(response);
  out.id = int64Field(response, "ID");
  out.ttlSeconds = int64Field(response, "TTL");
  out.grantedTtlSeconds = int64Field(response, "grantedTTL");
  const json* keys = find(response, "keys");
  if (keys != nullptr) {
    if (!keys->is_array()) malformed("keys", *keys);
    for (const json& key : *keys) {
      if (!key.is_string()) malformed("keys", key);
      auto bytes = base64Decode(key.get_ref<const std::string&>());
      if (!bytes) malformed("keys", key);
      out.keys.push_back(std::move(*bytes));
    }
  }
  return out;
}

MemberStatus parseStatus(const json& response) {
  MemberStatus out;
  out.header = parseHeader(response);
  out.version = stringField(response, "version");
  out.leader = uint64Field(response, "leader");
  out.raftIndex = uint64Field(response, "raftIndex");
  out.dbSize = int64Field(response, "dbSize");
  return out;
}

std::optional<GatewayError> gatewayError(const json& body) {
  const json* error = find(body, "error");
  if (error == nullptr) return std::nullopt;
  GatewayError out;
  if (error->is_object()) {
    // A stream's error: {"error": {"grpc_code": 14, "http_code": 503, "message": "..."}}.
    out.grpcCode = static_cast<int>(int64Field(*error, "grpc_code"));
    out.message = stringField(*error, "message");
  } else if (error->is_string()) {
    // A unary call's: {"error": "...", "code": 14, "message": "..."}.
    out.grpcCode = static_cast<int>(int64Field(body, "code"));
    out.message = stringField(body, "message");
    if (out.message.empty()) out.message = error->get<std::string>();
  } else {
    malformed("error", *error);
  }
  if (out.grpcCode == 0) out.grpcCode = 2;  // an error without a code: gRPC Unknown
  return out;
}

EtcdError::Code codeForGrpc(int grpcCode) {
  switch (grpcCode) {
    case 4:
      return EtcdError::Code::kTimeout;  // DeadlineExceeded
    case 5:
      return EtcdError::Code::kNotFound;  // NotFound: lease, user, role
    case 7:                               // PermissionDenied
    case 16:
      return EtcdError::Code::kAuth;  // Unauthenticated: the token
    case 11:
      return EtcdError::Code::kCompacted;  // OutOfRange: a compacted (or future) revision
    case 3:                                // InvalidArgument
    case 6:                                // AlreadyExists
    case 8:                                // ResourceExhausted: no space, too many requests
    case 9:
      return EtcdError::Code::kRejected;  // FailedPrecondition
    case 12:
      return EtcdError::Code::kUnsupported;  // Unimplemented
    default:
      return EtcdError::Code::kUnavailable;  // Unavailable, Canceled, Aborted, Unknown,
                                             // Internal, DataLoss: the server's trouble
  }
}

WatchMessage parseWatchLine(std::string_view line) {
  json message = json::parse(line.begin(), line.end(), nullptr, false);
  if (message.is_discarded() || !message.is_object()) {
    throw EtcdError(EtcdError::Code::kBadResponse,
                    "a watch stream line is not JSON: '" + common::printablePrefix(line, 80) + "'");
  }
  WatchMessage out;
  if (auto error = gatewayError(message)) {
    out.kind = WatchMessage::Kind::kError;
    out.error = std::move(*error);
    return out;
  }
  if (find(message, "result") == nullptr) malformed("result", json("(missing)"));
  const json& result = objectField(message, "result");
  out.header = parseHeader(result);
  out.compactRevision = int64Field(result, "compact_revision");
  if (boolField(result, "canceled") || out.compactRevision != 0) {
    out.kind = WatchMessage::Kind::kCanceled;
    out.cancelReason = stringField(result, "cancel_reason");
    return out;
  }
  if (boolField(result, "created")) {
    out.kind = WatchMessage::Kind::kCreated;
    return out;
  }
  out.kind = WatchMessage::Kind::kEvents;
  const json* events = find(result, "events");
  if (events != nullptr) {
    if (!events->is_array()) malformed("events", *events);
    for (const json& event : *events) out.events.push_back(parseEvent(event));
  }
  return out;
}

}  // namespace ddprun::rendezvous::etcd::wire
