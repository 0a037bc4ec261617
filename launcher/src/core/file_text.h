// Reading a file into a string, for the agent's readers of /proc, /sys and cgroup files and of the
// entry point's first bytes: a thin use of the one file reader, common::readFile
// (ddprun/common/safe_files.h), so it never blocks on a FIFO, never reads a device, and reads
// files that report no size (/proc) to their end. Files a worker or another user controls (error
// files) are read with common::readFile itself, refusing links and saying when a file was larger.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>

#include "ddprun/common/safe_files.h"

namespace ddprun::launcher {

// The file's bytes from `offset` on (at most `limit`), or nothing when it cannot be opened, is not
// a regular file or cannot be read, with what was wrong in `why` when given ("No such file or
// directory", "is a FIFO, not a regular file"). A link at the name is followed unless `links`
// says otherwise: these paths are the kernel's or the user's own.
std::optional<std::string> readFileText(const std::string& path, std::string* why = nullptr,
                                        std::size_t limit = std::numeric_limits<std::size_t>::max(),
                                        std::size_t offset = 0,
                                        common::Links links = common::Links::kFollow);

}  // namespace ddprun::launcher
