// A short program's standard output: for the probes that ask an interpreter one question (which
// torch it has, whether it can import a module), run with a deadline and a bounded read.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// Runs argv[0] (a path) with `argv` and `environment`, stdin inherited, stderr inherited, in a
// process group of its own, and returns what it wrote to stdout, at most `maxBytes`, without the
// trailing whitespace. Nothing when it could not start or wrote nothing before it exited or the
// timeout passed; at the timeout its whole group is killed. Blocking; callable from any thread.
std::optional<std::string> programOutput(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& environment,
                                         std::chrono::milliseconds timeout,
                                         std::size_t maxBytes = 4096);

}  // namespace ddprun::launcher
