// Reading a whole file into a string with read(2): it works for /proc and /sys entries too, which
// report no size. One copy for the agent's readers of error files, /proc, cgroup and vmstat files.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>

namespace ddprun::launcher {

// The file's bytes from `offset` on (at most about `limit`: reading stops once that many have
// arrived), or nothing when it cannot be opened or read, with strerror's text in `why` when given.
std::optional<std::string> readFileText(const std::string& path, std::string* why = nullptr,
                                        std::size_t limit = std::numeric_limits<std::size_t>::max(),
                                        std::size_t offset = 0);

}  // namespace ddprun::launcher
