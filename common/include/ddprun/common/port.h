// A TCP port as written by a user or read from a variable or a store: one rule for every reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ddprun::common {

// 0..65535 written as 1 to 5 decimal digits, nothing else (no sign, no blanks). Nothing for
// anything else. Whether 0 ("any free port") is allowed is the caller's to say.
std::optional<std::uint16_t> parsePort(std::string_view text);

}  // namespace ddprun::common
