#include "core/visible_gpus.h"

#include <charconv>
#include <set>
#include <string_view>

namespace ddprun::launcher {
namespace {

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::optional<long long> wholeNumber(std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::vector<VisibleGpu> visibleGpus(int physicalGpus,
                                    const std::optional<std::string>& cudaVisibleDevices) {
  std::vector<VisibleGpu> visible;
  if (!cudaVisibleDevices) {
    for (int index = 0; index < physicalGpus; ++index) visible.push_back({index, {}});
    return visible;
  }
  std::set<long long> seen;
  std::string_view rest = *cudaVisibleDevices;
  while (static_cast<int>(visible.size()) < physicalGpus) {
    const auto comma = rest.find(',');
    const std::string_view device = trimmed(rest.substr(0, comma));
    if (device.starts_with("GPU-") || device.starts_with("MIG-")) {
      visible.push_back({-1, std::string(device)});
    } else {
      const auto index = wholeNumber(device);
      if (!index || *index < 0 || *index >= physicalGpus || !seen.insert(*index).second) break;
      visible.push_back({static_cast<int>(*index), {}});
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return visible;
}

}  // namespace ddprun::launcher
