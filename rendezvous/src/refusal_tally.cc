#include "refusal_tally.h"

#include <fmt/format.h>

namespace ddprun::rendezvous {

std::string groupedCount(std::uint64_t count) {
  std::string digits = std::to_string(count);
  for (auto at = static_cast<std::ptrdiff_t>(digits.size()) - 3; at > 0; at -= 3) {
    digits.insert(static_cast<std::size_t>(at), 1, ',');
  }
  return digits;
}

std::string refusalSummaryText(std::string_view source, std::string_view reason,
                               std::uint64_t count, std::chrono::steady_clock::duration over) {
  using std::chrono::duration_cast;
  const auto seconds = duration_cast<std::chrono::seconds>(over).count();
  const std::string span =
      seconds >= 1 ? fmt::format("{} s", seconds)
                   : fmt::format("{} ms", duration_cast<std::chrono::milliseconds>(over).count());
  return fmt::format("refused {} connection{} from {} in the last {}: {}", groupedCount(count),
                     count == 1 ? "" : "s", source, span, reason);
}

}  // namespace ddprun::rendezvous
