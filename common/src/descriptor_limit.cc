#include "ddprun/common/descriptor_limit.h"

#include <sys/resource.h>

#include <cstdint>

namespace ddprun::common {

DescriptorLimit raiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};  // cannot tell: assume plenty
  DescriptorLimit result;
  result.started = limit;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  result.inForce =
      limit.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<std::size_t>(limit.rlim_cur);
  return result;
}

}  // namespace ddprun::common
