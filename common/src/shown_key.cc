#include "ddprun/common/shown_key.h"

#include "ddprun/common/text.h"

namespace ddprun::common {

std::string shownKey(std::string_view key) {
  std::string shown = "'" + printablePrefix(key) + "'";
  if (key.size() > kShownBytes) shown += "... (" + std::to_string(key.size()) + " bytes)";
  return shown;
}

}  // namespace ddprun::common
