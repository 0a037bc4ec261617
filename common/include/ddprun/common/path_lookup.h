// Resolving a program name the way execvp does, for callers that must know the path before they
// exec (to report a missing program early, or to exec without a PATH search in the child).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::common {

// glibc's execvp search path when PATH is not set.
inline constexpr const char* kDefaultSearchPath = "/bin:/usr/bin";

// Whether `path` names a regular file this process may execute.
bool isExecutableFile(const std::string& path);

// Resolves `name` like execvp: a name containing '/' is used as it is (when it is executable);
// otherwise the directories of `searchPath` (':'-separated, an empty entry meaning the working
// directory) are tried in order. Returns the first executable candidate, or nothing.
std::optional<std::string> findExecutable(std::string_view name, std::string_view searchPath);

// The same, searching `environment`'s PATH (kDefaultSearchPath when it has none).
std::optional<std::string> findExecutable(std::string_view name,
                                          const std::map<std::string, std::string>& environment);

}  // namespace ddprun::common
