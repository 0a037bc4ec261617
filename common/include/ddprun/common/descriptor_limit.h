// This process's file descriptor limit (RLIMIT_NOFILE): the store daemon and the agent both raise
// it at start, since every connection they serve holds a descriptor.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ddprun::common {

struct DescriptorLimit {
  std::size_t inForce = SIZE_MAX;  // the soft limit now; SIZE_MAX when unlimited or unknown
  // The limits the process started with (none when unknown): what the agent gives its workers
  // back, so that a worker sees the limit it would have under torchrun.
  std::optional<rlimit> started;
};

// Raises the soft limit to the hard limit (the default soft limit, often 1024, would cap a store
// far below what a large job needs). Failing to raise it is not an error: the limit in force is
// returned.
DescriptorLimit raiseDescriptorLimit();

}  // namespace ddprun::common
