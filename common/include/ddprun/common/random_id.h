// Random identifiers where any unique string will do: --standalone's run id (torchrun uses a
// UUID) and the marker the agent puts in its workers' environment (DDPRUN_AGENT).
#pragma once

#include <string>

namespace ddprun::common {

// 16 lowercase hex characters from the kernel's random generator (getrandom(2); std::random_device
// should it fail). Not a secret: job secrets come from a token file.
std::string randomHexId();

}  // namespace ddprun::common
