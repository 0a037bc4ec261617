#include "core/cuda_visible_devices.h"

#include <charconv>
#include <set>
#include <string_view>

namespace ddprun::launcher {

namespace {

std::string_view withoutBlanks(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n\v\f");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n\v\f") - first + 1);
}

}  // namespace

std::vector<VisibleDevice> visibleDevices(const std::optional<std::string>& given,
                                          int physicalGpus) {
  std::vector<VisibleDevice> devices;
  if (!given) {
    for (int index = 0; index < physicalGpus; ++index) devices.push_back(VisibleDevice{index, {}});
    return devices;
  }
  std::string_view mask = *given;
  std::set<int> seen;
  while (static_cast<int>(devices.size()) < physicalGpus) {
    const auto comma = mask.find(',');
    const std::string_view entry = withoutBlanks(mask.substr(0, comma));
    if (entry.starts_with("GPU-") || entry.starts_with("MIG-")) {
      devices.push_back(VisibleDevice{-1, std::string(entry)});
    } else {
      int index = -1;
      const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
      if (entry.empty() || error != std::errc() || end != entry.data() + entry.size() ||
          index < 0 || index >= physicalGpus || !seen.insert(index).second) {
        break;
      }
      devices.push_back(VisibleDevice{index, {}});
    }
    if (comma == std::string_view::npos) break;
    mask.remove_prefix(comma + 1);
  }
  return devices;
}

}  // namespace ddprun::launcher
