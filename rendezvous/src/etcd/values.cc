// The public header's value helpers: key ranges, compares, code names.
#include <stdexcept>

#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::rendezvous::etcd {

std::string prefixRangeEnd(std::string_view prefix) {
  if (prefix.empty()) {
    throw std::invalid_argument(
        "an empty key prefix would cover etcd's whole keyspace, which other users share");
  }
  // clientv3's GetPrefixRangeEnd: the last byte below 0xff is raised by one and everything after
  // it dropped ("a\xff" -> "b"); a prefix of 0xff bytes only has no key above its keys, so the
  // range runs to the end ("\0" in etcd's range_end).
  std::string end(prefix);
  for (std::size_t i = end.size(); i-- > 0;) {
    if (static_cast<unsigned char>(end[i]) < 0xff) {
      end[i] = static_cast<char>(static_cast<unsigned char>(end[i]) + 1);
      end.resize(i + 1);
      return end;
    }
  }
  return std::string(1, '\0');
}

KeyRange KeyRange::prefix(std::string prefix) {
  std::string end = prefixRangeEnd(prefix);
  return {std::move(prefix), std::move(end)};
}

Compare Compare::version(std::string key, Result result, std::int64_t version) {
  return {std::move(key), Target::kVersion, result, version, {}};
}
Compare Compare::createRevision(std::string key, Result result, Revision revision) {
  return {std::move(key), Target::kCreateRevision, result, revision, {}};
}
Compare Compare::modRevision(std::string key, Result result, Revision revision) {
  return {std::move(key), Target::kModRevision, result, revision, {}};
}
Compare Compare::value(std::string key, Result result, std::string value) {
  return {std::move(key), Target::kValue, result, 0, std::move(value)};
}
Compare Compare::lease(std::string key, Result result, LeaseId lease) {
  return {std::move(key), Target::kLease, result, lease, {}};
}

std::string_view codeName(EtcdError::Code code) {
  switch (code) {
    case EtcdError::Code::kUnreachable:
      return "unreachable";
    case EtcdError::Code::kUnavailable:
      return "unavailable";
    case EtcdError::Code::kTimeout:
      return "timeout";
    case EtcdError::Code::kCompacted:
      return "compacted";
    case EtcdError::Code::kAuth:
      return "auth";
    case EtcdError::Code::kNotFound:
      return "not found";
    case EtcdError::Code::kRejected:
      return "rejected";
    case EtcdError::Code::kBadResponse:
      return "bad response";
    case EtcdError::Code::kUnsupported:
      return "unsupported";
  }
  return "unknown";
}

}  // namespace ddprun::rendezvous::etcd
