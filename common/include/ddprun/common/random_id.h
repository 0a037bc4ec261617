// Random identifiers where any unique string will do: --standalone's run id (torchrun uses a
// UUID) and the marker the agent puts in its workers' environment (DDPRUN_AGENT).
#pragma once

#include <cstddef>
#include <string>

namespace ddprun::common {

// 16 lowercase hex characters from the kernel's random generator (getrandom(2); std::random_device
// should it fail). Not a secret: job secrets come from randomHexSecret or a token file.
std::string randomHexId();

// `bytes` random bytes from getrandom(2), as lowercase hex (`openssl rand -hex N`): a job's
// token. Throws std::system_error when the kernel gives none (no weaker source is used).
std::string randomHexSecret(std::size_t bytes);

}  // namespace ddprun::common
