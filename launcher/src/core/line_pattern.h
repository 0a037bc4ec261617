// LinePattern: a regular expression a worker's output lines are matched against
// (--progress-pattern, --start-pattern, --fail-pattern; docs/errors.md, "Progress from log
// lines"). POSIX extended syntax (regcomp, as `grep -E`), searched anywhere in the line, bytes as
// they are (the C locale): one regexec per line with REG_STARTEND, so a line is matched where it
// lies in the read buffer, never copied. glibc's regexec takes a fraction of a microsecond per
// line where std::regex takes one to ten times more (docs/benchmarks.md, "Patterns on the output
// path"), and RE2 would be one more library on every node.
//
// Thread safety: a compiled pattern is read-only; matches() may be called from any thread.
#pragma once

#include <regex.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class LinePattern {
 public:
  // The compiled `source`, or nothing with `error` set to what regcomp says is wrong with it
  // ("Unmatched ( or \\(").
  static std::optional<LinePattern> compile(const std::string& source, std::string& error);

  // Whether `line` (without its '\n') holds a match.
  bool matches(std::string_view line) const;
  const std::string& source() const { return source_; }

 private:
  struct Compiled;
  LinePattern(std::string source, std::shared_ptr<const Compiled> compiled)
      : source_(std::move(source)), compiled_(std::move(compiled)) {}
  std::string source_;
  std::shared_ptr<const Compiled> compiled_;  // shared: copies match with one regex_t
};

}  // namespace ddprun::launcher
