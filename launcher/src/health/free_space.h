// The free-space check of the health gate: a node whose log dir, scratch dir (TMPDIR) or /dev/shm
// is all but full fails before its workers start (a full /dev/shm breaks NCCL's and the
// DataLoader's shared memory; a full log dir loses the failure's evidence).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "health/health_gate.h"

namespace ddprun::launcher {

struct FreeSpacePlace {
  std::string what;  // "the log dir", "TMPDIR", "/dev/shm"
  std::string path;
};

// The places this node writes to: the log dir (when given), TMPDIR (else /tmp) and /dev/shm.
std::vector<FreeSpacePlace> freeSpacePlaces(const std::string& logDir, const std::string& tmpDir);

// The first place with less than `floor` bytes free to an unprivileged writer, as a failure;
// nothing when all have enough. A place that does not exist (no /dev/shm) is not checked.
std::optional<HealthVerdict> checkFreeSpace(const std::vector<FreeSpacePlace>& places,
                                            std::uint64_t floor);

}  // namespace ddprun::launcher
