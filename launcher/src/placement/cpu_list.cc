#include "placement/cpu_list.h"

#include <charconv>

namespace ddprun::launcher {
namespace {

// The largest CPU index accepted: far above any machine, and a bound on a list's expansion.
constexpr int kMaxCpu = 1 << 20;

std::optional<int> cpuIndex(std::string_view text) {
  int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > kMaxCpu) {
    return std::nullopt;
  }
  return value;
}

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\n") - first + 1);
}

}  // namespace

std::optional<CpuSet> parseCpuList(std::string_view text) {
  CpuSet cpus;
  text = trimmed(text);
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = trimmed(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const auto dash = item.find('-');
    const auto first = cpuIndex(item.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : cpuIndex(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

std::string cpuListText(const CpuSet& cpus) {
  std::string text;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    while (++it != cpus.end() && *it == last + 1) ++last;
    if (!text.empty()) text += ',';
    text += std::to_string(first);
    if (last != first) text += '-' + std::to_string(last);
  }
  return text;
}

}  // namespace ddprun::launcher
