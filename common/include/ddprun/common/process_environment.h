// The process's own environment as NAME -> value: what the agent passes on to its workers and
// reads its settings from (a copy, so later setenv calls do not change it).
#pragma once

#include <map>
#include <string>

namespace ddprun::common {

// Every "NAME=value" entry of environ; an entry without '=' is skipped.
std::map<std::string, std::string> processEnvironment();

}  // namespace ddprun::common
