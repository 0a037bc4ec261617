// StartupError: what the agent's wiring throws when it cannot start for a reason the user can fix
// (a directory it cannot make, a token file it cannot use, a port it cannot host the store on).
// runAgent turns it into one line on stderr and the bad-input exit code (core/exit_codes.h), the
// one place that decides it; nothing has been started when it is thrown.
#pragma once

#include <stdexcept>

namespace ddprun::launcher {

// what(): one line, the problem and the fix, without the "ddprun: error: " prefix.
class StartupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ddprun::launcher
