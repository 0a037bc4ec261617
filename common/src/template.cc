#include "ddprun/common/template.h"

#include <algorithm>
#include <cctype>

namespace ddprun::common {
namespace {

// Python's default idpattern with re.ASCII | re.IGNORECASE; isalpha/isalnum in the "C" locale,
// so a non-ASCII byte never starts or continues a name.
bool identifierStart(char c) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c)) != 0;
}
bool identifierChar(char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)) != 0; }

bool isIdentifier(std::string_view name) {
  return !name.empty() && identifierStart(name.front()) &&
         std::all_of(name.begin(), name.end(), identifierChar);
}

}  // namespace

std::string safeSubstitute(std::string_view text,
                           const std::map<std::string, std::string>& values) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i++];
      continue;
    }
    const char next = text[i + 1];
    std::string_view name;  // the placeholder's name, when it is one
    std::size_t after = i;  // where the text continues after the placeholder
    if (next == '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (next == '{') {
      const std::size_t close = text.find('}', i + 2);
      if (close != std::string_view::npos) {
        name = text.substr(i + 2, close - i - 2);
        after = close + 1;
      }
    } else if (identifierStart(next)) {
      std::size_t end = i + 1;
      while (end < text.size() && identifierChar(text[end])) ++end;
      name = text.substr(i + 1, end - i - 1);
      after = end;
    }
    // safe_substitute keeps an unknown or malformed placeholder as written: emit the '$' and go
    // on from the next character, which copies the rest of it unchanged.
    const auto value = isIdentifier(name) ? values.find(std::string(name)) : values.end();
    if (value == values.end()) {
      out += text[i++];
    } else {
      out += value->second;
      i = after;
    }
  }
  return out;
}

}  // namespace ddprun::common
