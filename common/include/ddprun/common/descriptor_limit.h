// This process's file descriptor limit (RLIMIT_NOFILE): the store daemon and the agent both raise
// it at start, since every connection they serve holds a descriptor.
#pragma once

#include <cstddef>

namespace ddprun::common {

// Raises the soft limit to the hard limit (the default soft limit, often 1024, would cap a store
// far below what a large job needs) and returns the soft limit now in force; SIZE_MAX when it is
// unlimited. Failing to raise it is not an error: the limit in force is returned.
std::size_t raiseDescriptorLimit();

}  // namespace ddprun::common
