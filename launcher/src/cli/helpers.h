// Small helpers shared by the command line's files: text, numbers, the environment. Declared in
// cli_detail, as is everything else under cli/ that is not cli.h: only cli/ uses them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/port.h"

namespace ddprun::launcher::cli_detail {

// The environment as NAME -> value (main passes the real one; tests pass their own).
using Environment = std::map<std::string, std::string>;

// The value of `name`, or nullptr when it is not set (set to "" is set).
const std::string* lookup(const Environment& environment, const std::string& name);

// Without leading and trailing blanks (" \t\r\n\v\f").
std::string_view trim(std::string_view text);
// Every part between separators: "a,,b" -> {"a", "", "b"}; "" -> {""}.
std::vector<std::string_view> split(std::string_view text, char separator);
std::string lowerCase(std::string_view text);
std::string upperCase(std::string_view text);
// 'text' with control characters escaped: user text inside a one-line message.
std::string quote(std::string_view text);

// A whole number: optional '-', digits, nothing else (surrounding blanks allowed, as Python's
// int() allows them in PET_ values). No '+', no "3.0", no overflow.
std::optional<long long> parseWholeNumber(std::string_view text);
// A finite number ("0.5", "1e3", surrounding blanks allowed); not inf or nan.
std::optional<double> parseFiniteNumber(std::string_view text);
// The most seconds any duration option or --rdzv-conf key takes, ~31 years: anything larger is a
// typo, and would overflow later arithmetic (a deadline in a clock's nanoseconds).
inline constexpr double kMaxSeconds = 1e9;
// 0..65535 written as 1 to 5 digits, nothing else (one rule for every reader: common/port.h).
using common::parsePort;

}  // namespace ddprun::launcher::cli_detail
