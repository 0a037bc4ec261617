// The JSON bodies of etcd's v3 gateway, both ways, with no I/O: requests as etcd's proto3 JSON
// (bytes as base64, int64 as strings), and answers as typed values. What the gateway writes
// (docs/etcd.md, "Wire facts"): proto field names (create_revision), int64 and uint64 as JSON
// strings, and every field at its zero value left out: an empty range has no "kvs" and no
// "count", a failed txn no "succeeded", a PUT event no "type", an expired keep-alive no "TTL".
// So an absent field reads as its zero, and a present one of the wrong type is a bad response.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::rendezvous::etcd::wire {

using nlohmann::json;

// --- fields (each throws EtcdError(kBadResponse) naming the field when it is malformed) ---
std::int64_t int64Field(const json& object, std::string_view name);
std::uint64_t uint64Field(const json& object, std::string_view name);
bool boolField(const json& object, std::string_view name);
std::string stringField(const json& object, std::string_view name);
// A base64 field, decoded.
std::string bytesField(const json& object, std::string_view name);

// --- requests ---
json rangeBody(const RangeRequest& request);
json putBody(const PutRequest& request);
json deleteBody(const DeleteRequest& request);
json compareBody(const Compare& compare);
json txnBody(const Txn& txn);
json watchCreateBody(const WatchRequest& request);
json leaseIdBody(LeaseId lease);

// --- answers ---
ResponseHeader parseHeader(const json& response);
KeyValue parseKeyValue(const json& kv);
RangeResult parseRange(const json& response);
PutResult parsePut(const json& response);
DeleteResult parseDelete(const json& response);
TxnResult parseTxn(const json& response);
LeaseGrant parseLeaseGrant(const json& response);
// The keep-alive answer is a stream message: {"result": {...}}. An expired lease comes back
// with no TTL (its zero): that throws EtcdError(kNotFound).
LeaseKeepAlive parseKeepAlive(const json& response);
LeaseTimeToLive parseTimeToLive(const json& response);
MemberStatus parseStatus(const json& response);

// An error the gateway wrote instead of an answer: a unary call's {"error": "...", "code": 14,
// "message": "..."} or a stream's {"error": {"grpc_code": 14, "http_code": 503, "message": ...}}.
struct GatewayError {
  int grpcCode = 2;  // gRPC Unknown when no code is given
  std::string message;
};
std::optional<GatewayError> gatewayError(const json& body);

// What a gRPC status code means to a caller.
EtcdError::Code codeForGrpc(int grpcCode);

// One line of a watch stream.
struct WatchMessage {
  enum class Kind {
    kCreated,   // the watch exists; header.revision is the store's revision at creation
    kEvents,    // events (or none: a progress notification)
    kCanceled,  // etcd ended the watch: compactRevision != 0 when it was compacted away
    kError,     // the stream failed: error
  };
  Kind kind = Kind::kEvents;
  ResponseHeader header;
  std::vector<WatchEvent> events;
  Revision compactRevision = 0;
  std::string cancelReason;
  GatewayError error;
};
// Throws EtcdError(kBadResponse) for a line that is not one of those.
WatchMessage parseWatchLine(std::string_view line);

}  // namespace ddprun::rendezvous::etcd::wire
