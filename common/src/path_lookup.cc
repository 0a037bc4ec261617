#include "ddprun/common/path_lookup.h"

#include <sys/stat.h>
#include <unistd.h>

namespace ddprun::common {

bool isExecutableFile(const std::string& path) {
  // execve also accepts a directory with the x bit only to fail with EACCES: check the type too.
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::string> findExecutable(std::string_view name, std::string_view searchPath) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::string path(name);
    if (isExecutableFile(path)) return path;
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= searchPath.size()) {
    const std::size_t end = searchPath.find(':', start);
    const std::string_view directory = searchPath.substr(
        start, end == std::string_view::npos ? std::string_view::npos : end - start);
    // An empty entry means the working directory, as for execvp (and the shell).
    std::string candidate = directory.empty() ? std::string(".") : std::string(directory);
    candidate += '/';
    candidate += name;
    if (isExecutableFile(candidate)) return candidate;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> findExecutable(std::string_view name,
                                          const std::map<std::string, std::string>& environment) {
  const auto path = environment.find("PATH");
  return findExecutable(name, path == environment.end() ? std::string_view(kDefaultSearchPath)
                                                        : std::string_view(path->second));
}

}  // namespace ddprun::common
