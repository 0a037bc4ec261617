#include "ddprun/common/run_id.h"

#include <algorithm>

namespace ddprun::common {

bool isRunId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRunIdBytes || id.front() == '.' || id.front() == '-') {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace ddprun::common
