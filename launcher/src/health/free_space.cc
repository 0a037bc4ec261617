#include "health/free_space.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include "ddprun/common/text.h"

namespace ddprun::launcher {

std::vector<FreeSpacePlace> freeSpacePlaces(const std::string& logDir, const std::string& tmpDir) {
  std::vector<FreeSpacePlace> places;
  if (!logDir.empty()) places.push_back({"the log dir", logDir});
  places.push_back({"TMPDIR", tmpDir.empty() ? std::string("/tmp") : tmpDir});
  places.push_back({"/dev/shm", "/dev/shm"});
  return places;
}

std::optional<HealthVerdict> checkFreeSpace(const std::vector<FreeSpacePlace>& places,
                                            std::uint64_t floor) {
  if (floor == 0) return std::nullopt;
  for (const FreeSpacePlace& place : places) {
    struct statvfs info {};
    if (::statvfs(place.path.c_str(), &info) != 0) continue;
    const std::uint64_t free = static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
    if (free >= floor) continue;
    return HealthVerdict::fail(
        "free space", fmt::format("{} ({}) has {:.1f} MiB free, under the floor of {:.1f} MiB "
                                  "(--health-min-free-mb)",
                                  place.what, common::printable(place.path), free / 1048576.0,
                                  floor / 1048576.0));
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
