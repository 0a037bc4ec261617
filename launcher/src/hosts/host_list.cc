#include "hosts/host_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "ddprun/common/text.h"

namespace ddprun::launcher::hosts {
namespace {

using common::printable;

// A slot or slot count: digits only, bounded (a hostfile's slots=10000000000 is a typo).
std::optional<int> smallNumber(std::string_view text) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// ssh takes a first argument starting with '-' for an option, and a name with a space, a quote
// or a control character is no host name: refused where it is written, not at the ssh.
bool usableHostName(std::string_view name) {
  if (name.empty() || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f && c != '\'' && c != '"' && c != '\\' && c != '#' && c != ',' &&
           c != '@';
  });
}

std::vector<std::string_view> splitOn(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

}  // namespace

std::vector<ListedHost> parseHostList(std::string_view text, std::string_view origin) {
  std::vector<ListedHost> hosts;
  std::set<std::string_view> seen;
  for (const std::string_view name : splitOn(text, ',')) {
    if (!usableHostName(name)) {
      throw HostListError(fmt::format(
          "{} {}: {} is not a host name; give names or addresses separated by commas, e.g. {} "
          "node1,node2",
          origin, printable(text), name.empty() ? "an empty name" : printable(name), origin));
    }
    if (!seen.insert(name).second) {
      throw HostListError(fmt::format("{} {}: host {} is listed twice; list each host once", origin,
                                      printable(text), printable(name)));
    }
    hosts.push_back({std::string(name), 0});
  }
  return hosts;
}

std::vector<ListedHost> parseHostfile(std::string_view text, std::string_view fileName) {
  std::vector<ListedHost> hosts;
  std::map<std::string, int> lineOf;
  int number = 0;
  for (std::string_view line : splitOn(text, '\n')) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    const auto parts = blankSeparatedWords(line);
    if (parts.empty()) continue;
    const std::string where = fmt::format("{}:{}", printable(fileName), number);
    const auto bad = [&](std::string_view why) {
      return HostListError(
          fmt::format("hostfile {}: {} in {}; each line is 'HOST slots=N' "
                      "(e.g. node1 slots=8), '#' starts a comment",
                      where, why, printable(line)));
    };
    if (parts.size() != 2) throw bad(parts.size() == 1 ? "no slots=N" : "more than 'HOST slots=N'");
    if (!usableHostName(parts[0]))
      throw bad(fmt::format("{} is not a host name", printable(parts[0])));
    const std::string_view slotsWord = parts[1];
    const auto slots =
        slotsWord.starts_with("slots=") ? smallNumber(slotsWord.substr(6)) : std::nullopt;
    if (!slots || *slots < 1) throw bad("slots must be a whole number >= 1");
    const std::string name(parts[0]);
    if (const auto [it, fresh] = lineOf.emplace(name, number); !fresh) {
      throw bad(fmt::format("host {} is listed already on line {}", printable(name), it->second));
    }
    hosts.push_back({name, *slots});
  }
  if (hosts.empty()) {
    throw HostListError(
        fmt::format("hostfile {} lists no host; write one 'HOST slots=N' line per "
                    "host",
                    printable(fileName)));
  }
  return hosts;
}

std::vector<std::string_view> blankSeparatedWords(std::string_view text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && blank(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !blank(text[i])) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

std::vector<SelectedHost> allHosts(const std::vector<ListedHost>& listed) {
  std::vector<SelectedHost> out;
  for (const auto& host : listed) out.push_back({host.name, host.slots, std::nullopt});
  return out;
}

std::vector<SelectedHost> selectHosts(const std::vector<ListedHost>& listed, SelectionKind kind,
                                      std::string_view spec, std::string_view origin) {
  const bool include = kind == SelectionKind::kInclude;
  const auto bad = [&](std::string_view why) {
    return HostListError(
        fmt::format("{} {}: {}; write NAME[:SLOT,SLOT...]@NAME..., e.g. {} "
                    "node1@node2:0,1",
                    origin, printable(spec), why, origin));
  };
  // The hosts the spec names, each with the slots it lists (empty: the whole host), in order.
  std::map<std::string, std::set<int>, std::less<>> named;
  for (const std::string_view part : splitOn(spec, '@')) {
    const auto colon = part.find(':');
    const std::string_view name = part.substr(0, colon);
    const auto host = std::find_if(listed.begin(), listed.end(),
                                   [&](const ListedHost& h) { return h.name == name; });
    if (host == listed.end()) {
      throw bad(name.empty()
                    ? std::string("an empty host name")
                    : fmt::format("unknown host {} (not among the hosts given)", printable(name)));
    }
    if (named.contains(name)) throw bad(fmt::format("host {} is named twice", printable(name)));
    std::set<int>& slots = named[std::string(name)];
    if (colon == std::string_view::npos) continue;
    for (const std::string_view slotText : splitOn(part.substr(colon + 1), ',')) {
      const auto slot = smallNumber(slotText);
      if (!slot) throw bad(fmt::format("{} is not a slot number", printable(slotText)));
      if (host->slots > 0 && *slot >= host->slots) {
        throw bad(fmt::format("host {} has slots 0..{} (slots={})", printable(name),
                              host->slots - 1, host->slots));
      }
      if (host->slots == 0 && !include) {
        throw bad(
            fmt::format("the slots of host {} are not known; give a hostfile with "
                        "slots=N to exclude slots",
                        printable(name)));
      }
      slots.insert(*slot);
    }
  }
  std::vector<SelectedHost> out;
  for (const auto& host : listed) {
    const auto it = named.find(host.name);
    if (include) {
      if (it == named.end()) continue;
      out.push_back({host.name, host.slots, std::nullopt});
      if (!it->second.empty()) out.back().devices.emplace(it->second.begin(), it->second.end());
      continue;
    }
    if (it == named.end()) {
      out.push_back({host.name, host.slots, std::nullopt});
      continue;
    }
    if (it->second.empty()) continue;  // the whole host excluded
    std::vector<int> left;
    for (int slot = 0; slot < host.slots; ++slot) {
      if (!it->second.contains(slot)) left.push_back(slot);
    }
    if (left.empty()) continue;
    out.push_back({host.name, host.slots, std::move(left)});
  }
  if (out.empty()) throw bad("no host is left to run on");
  return out;
}

}  // namespace ddprun::launcher::hosts
