#include "cli/helpers.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {

namespace {
constexpr std::string_view kWhitespace = " \t\r\n\v\f";
}  // namespace

const std::string* lookup(const Environment& environment, const std::string& name) {
  const auto it = environment.find(name);
  return it == environment.end() ? nullptr : &it->second;
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(kWhitespace);
  return text.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::string lowerCase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string upperCase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

std::string quote(std::string_view text) { return "'" + common::printable(text) + "'"; }

std::optional<long long> parseWholeNumber(std::string_view text) {
  text = trim(text);
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || next != end) return std::nullopt;
  return value;
}

std::optional<double> parseFiniteNumber(std::string_view text) {
  text = trim(text);
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || next != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace ddprun::launcher::cli_detail
