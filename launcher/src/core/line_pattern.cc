#include "core/line_pattern.h"

#include <array>

namespace ddprun::launcher {

struct LinePattern::Compiled {
  regex_t regex{};
  bool made = false;  // regcomp succeeded: regfree is owed
  ~Compiled() {
    if (made) ::regfree(&regex);
  }
};

std::optional<LinePattern> LinePattern::compile(const std::string& source, std::string& error) {
  auto compiled = std::make_shared<Compiled>();
  // REG_NOSUB: only whether it matches, which lets glibc skip the submatch bookkeeping.
  const int code = ::regcomp(&compiled->regex, source.c_str(), REG_EXTENDED | REG_NOSUB);
  if (code != 0) {
    std::array<char, 256> text{};
    ::regerror(code, &compiled->regex, text.data(), text.size());
    error = text.data();
    return std::nullopt;
  }
  compiled->made = true;
  return LinePattern(source, std::move(compiled));
}

bool LinePattern::matches(std::string_view line) const {
  // REG_STARTEND: the line is [rm_so, rm_eo) of `line.data()`, no '\0' needed after it.
  regmatch_t range{0, static_cast<regoff_t>(line.size())};
  const char* text = line.empty() ? "" : line.data();
  return ::regexec(&compiled_->regex, text, 1, &range, REG_STARTEND) == 0;
}

}  // namespace ddprun::launcher
