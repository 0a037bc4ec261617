// Base64 (RFC 4648, with padding) for the etcd JSON gateway, which carries every key, value and
// range end as base64 of its bytes (protobuf's JSON form of `bytes`).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun::rendezvous::etcd {

std::string base64Encode(std::string_view bytes);

// The bytes, or nothing for text that is not base64: a character outside the alphabet, a length
// that is not a multiple of 4, padding anywhere but at the end. Protobuf's JSON also accepts the
// URL-safe alphabet and missing padding; etcd's gateway writes neither, so neither is read.
std::optional<std::string> base64Decode(std::string_view text);

}  // namespace ddprun::rendezvous::etcd
