#include "cli/slurm_hostlist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <variant>

#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printablePrefix;

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// One number of a range, as written: its value and its width (the low bound's sets the padding).
struct Bound {
  std::uint64_t value = 0;
  std::size_t width = 0;
};

// One range of a bracket group: LO..HI, each printed at least `width` digits wide.
struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0;
};

// One bracket group: its ranges as written, never expanded before the whole item is counted, so
// that the work and memory of reading a list are bounded by its length and kMaxHosts, whatever
// its ranges multiply to.
struct Group {
  std::vector<Range> ranges;
  std::size_t count = 0;  // how many numbers the ranges stand for, at most kMaxHosts
};

std::size_t digitCount(std::uint64_t value) {
  std::size_t digits = 1;
  while (value >= 10) {
    value /= 10;
    ++digits;
  }
  return digits;
}

// An item: literal text and groups, in order.
using Part = std::variant<std::string, Group>;

Bound parseBound(std::string_view digits, std::string_view item) {
  if (digits.empty()) {
    throw SlurmHostlistError(
        fmt::format("'{}': a range has an empty bound", printablePrefix(item)));
  }
  for (const char c : digits) {
    if (!isDigit(c)) {
      throw SlurmHostlistError(
          fmt::format("'{}': '{}' in a range is not a number (ranges are N or "
                      "LO-HI, decimal digits only)",
                      printablePrefix(item), printablePrefix(digits)));
    }
  }
  // 18 digits fit in 64 bits; longer is no host number anyone means.
  if (digits.size() > 18) {
    throw SlurmHostlistError(fmt::format("'{}': the number {} is too long", printablePrefix(item),
                                         printablePrefix(digits)));
  }
  Bound bound{0, digits.size()};
  for (const char c : digits) bound.value = bound.value * 10 + static_cast<std::uint64_t>(c - '0');
  return bound;
}

// "0-5,12,20-25" (what is between the brackets) -> its numbers.
Group parseGroup(std::string_view ranges, std::string_view item) {
  Group group;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = ranges.find(',', start);
    const std::string_view range = ranges.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (range.empty()) {
      throw SlurmHostlistError(
          fmt::format("'{}': an empty range in brackets", printablePrefix(item)));
    }
    const std::size_t dash = range.find('-');
    const Bound lo = parseBound(range.substr(0, dash), item);
    const Bound hi = dash == std::string_view::npos ? lo : parseBound(range.substr(dash + 1), item);
    if (lo.value > hi.value) {
      throw SlurmHostlistError(
          fmt::format("'{}': the range {} runs backwards (its low bound is above "
                      "its high bound)",
                      printablePrefix(item), printablePrefix(range)));
    }
    if (hi.value - lo.value >= kMaxHosts || group.count + (hi.value - lo.value) >= kMaxHosts) {
      throw SlurmHostlistError(
          fmt::format("'{}': more than {} hosts", printablePrefix(item), kMaxHosts));
    }
    group.ranges.push_back({lo.value, hi.value, lo.width});
    group.count += static_cast<std::size_t>(hi.value - lo.value) + 1;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return group;
}

// "rack[1-2]-n[01-04]" -> "rack", {1,2}, "-n", {01..04}.
std::vector<Part> parseItem(std::string_view item) {
  std::vector<Part> parts;
  std::size_t i = 0;
  while (i < item.size()) {
    const std::size_t open = item.find_first_of("[]", i);
    if (open == std::string_view::npos) {
      parts.emplace_back(std::string(item.substr(i)));
      break;
    }
    if (item[open] == ']') {
      throw SlurmHostlistError(
          fmt::format("'{}': a ']' that no '[' opened", printablePrefix(item)));
    }
    if (open > i) parts.emplace_back(std::string(item.substr(i, open - i)));
    const std::size_t close = item.find_first_of("[]", open + 1);
    if (close == std::string_view::npos) {
      throw SlurmHostlistError(
          fmt::format("'{}': a '[' that is never closed", printablePrefix(item)));
    }
    if (item[close] == '[') {
      throw SlurmHostlistError(
          fmt::format("'{}': brackets inside brackets", printablePrefix(item)));
    }
    parts.emplace_back(parseGroup(item.substr(open + 1, close - open - 1), item));
    i = close + 1;
  }
  // The longest name the item makes: a bound on the work and memory of expanding it, and on the
  // depth of expand()'s recursion (one level per part).
  std::size_t longest = 0;
  for (const auto& part : parts) {
    if (const auto* text = std::get_if<std::string>(&part)) {
      longest += text->size();
      continue;
    }
    std::size_t widest = 0;
    for (const Range& range : std::get<Group>(part).ranges) {
      widest = std::max({widest, range.width, digitCount(range.hi)});
    }
    longest += widest;
  }
  if (longest > kMaxHostName) {
    throw SlurmHostlistError(fmt::format("'{}': a host name longer than {} characters",
                                         printablePrefix(item), kMaxHostName));
  }
  return parts;
}

// How many hosts the parts make, or kMaxHosts + 1 for more (each factor is at most kMaxHosts, so
// the product checked as it grows never overflows).
std::size_t countHosts(const std::vector<Part>& parts) {
  std::size_t count = 1;
  for (const auto& part : parts) {
    if (const auto* group = std::get_if<Group>(&part)) {
      count *= group->count;
      if (count > kMaxHosts) return kMaxHosts + 1;
    }
  }
  return count;
}

// The cartesian product, the leftmost group slowest (Slurm's _push_range_list recursion).
void expand(const std::vector<Part>& parts, std::size_t index, std::string& prefix,
            std::vector<std::string>& hosts) {
  if (index == parts.size()) {
    hosts.push_back(prefix);
    return;
  }
  const std::size_t keep = prefix.size();
  if (const auto* text = std::get_if<std::string>(&parts[index])) {
    prefix += *text;
    expand(parts, index + 1, prefix, hosts);
  } else {
    for (const Range& range : std::get<Group>(parts[index]).ranges) {
      for (std::uint64_t number = range.lo; number <= range.hi; ++number) {
        prefix += fmt::format("{:0{}}", number, range.width);
        expand(parts, index + 1, prefix, hosts);
        prefix.resize(keep);
      }
    }
  }
  prefix.resize(keep);
}

}  // namespace

std::vector<std::string> expandSlurmHostlist(std::string_view text) {
  // Every item is read and counted before any is expanded: a list over the cap costs no more
  // than its own length to refuse.
  std::vector<std::vector<Part>> items;
  std::size_t count = 0;
  auto add = [&](std::string_view item) {
    items.push_back(parseItem(item));
    count += countHosts(items.back());
    if (count > kMaxHosts) {
      throw SlurmHostlistError(fmt::format("'{}': more than {} hosts (ddprun's cap, as Slurm's)",
                                           printablePrefix(text), kMaxHosts));
    }
  };
  const auto emptyHost = [&] {
    return SlurmHostlistError(fmt::format(
        "'{}': an empty host name (two commas in a row, or one at an end)", printablePrefix(text)));
  };
  // Items end at a ',' or a blank outside brackets. Runs of blanks, and blanks beside a comma,
  // are one separator (Slurm writes lists either way); an empty item between commas is a mistake.
  std::size_t start = 0;
  int depth = 0;
  bool anyComma = false;
  bool itemSinceComma = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) {
      throw SlurmHostlistError(
          fmt::format("'{}': a ']' that no '[' opened", printablePrefix(text)));
    }
    if (depth != 0 || (c != ',' && !isBlank(c))) continue;
    if (i > start) {
      add(text.substr(start, i - start));
      itemSinceComma = true;
    }
    if (c == ',') {
      if (!itemSinceComma) throw emptyHost();
      anyComma = true;
      itemSinceComma = false;
    }
    start = i + 1;
  }
  if (depth > 0) {
    throw SlurmHostlistError(
        fmt::format("'{}': a '[' that is never closed", printablePrefix(text)));
  }
  if (start < text.size()) {
    add(text.substr(start));
    itemSinceComma = true;
  }
  if (anyComma && !itemSinceComma) throw emptyHost();
  if (count == 0) throw SlurmHostlistError("the host list is empty");
  std::vector<std::string> hosts;
  hosts.reserve(count);
  for (const auto& parts : items) {
    std::string prefix;
    expand(parts, 0, prefix, hosts);
  }
  return hosts;
}

}  // namespace ddprun::launcher::cli_detail
