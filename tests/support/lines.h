// Matching the lines of captured output (a job's stdout or stderr, a log) against regular
// expressions (ECMAScript; `^` and `$` anchor at each line's ends in the line functions).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun::test {

// `text` split at '\n' (no empty last line for text that ends with one).
std::vector<std::string> lines(const std::string& text);
// How many lines of `text` `pattern` matches somewhere in.
int countLines(const std::string& text, const std::string& pattern);
// The first line of `text` that `pattern` matches in, if any.
std::optional<std::string> findLine(const std::string& text, const std::string& pattern);
// How many non-overlapping matches of `pattern` `text` holds, wherever they are (several in one
// line count several times).
int countMatches(const std::string& text, const std::string& pattern);

}  // namespace ddprun::test
