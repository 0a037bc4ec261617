#include "ddprun/common/text.h"

#include <algorithm>
#include <cstdio>

namespace ddprun::common {
namespace {

// The length of the well-formed UTF-8 sequence that starts at text[i] (overlong forms and
// surrogates are not), or 0.
std::size_t sequenceLength(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  std::size_t length = 0;
  if (lead < 0x80)
    length = 1;
  else if (lead >= 0xC2 && lead <= 0xDF)
    length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF)
    length = 3;
  else if (lead >= 0xF0 && lead <= 0xF4)
    length = 4;
  bool ok = length != 0 && i + length <= text.size();
  for (std::size_t k = 1; ok && k < length; ++k) {
    ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
  }
  if (ok && length == 3) {
    const auto second = static_cast<unsigned char>(text[i + 1]);
    ok = !(lead == 0xE0 && second < 0xA0) &&
         !(lead == 0xED && second >= 0xA0);  // overlong, surrogates
  } else if (ok && length == 4) {
    const auto second = static_cast<unsigned char>(text[i + 1]);
    ok = !(lead == 0xF0 && second < 0x90) && !(lead == 0xF4 && second >= 0x90);
  }
  return ok ? length : 0;
}

void appendEscaped(std::string& out, unsigned char byte) {
  char escaped[5];
  std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
  out += escaped;
}

// The code point of the well-formed UTF-8 sequence of `length` bytes at text[i].
char32_t codePoint(std::string_view text, std::size_t i, std::size_t length) {
  const auto lead = static_cast<unsigned char>(text[i]);
  char32_t point = length == 1   ? lead
                   : length == 2 ? (lead & 0x1F)
                   : length == 3 ? (lead & 0x0F)
                                 : (lead & 0x07);
  for (std::size_t k = 1; k < length; ++k)
    point = (point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  return point;
}

// The characters that reorder what a terminal shows (Trojan Source, CVE-2021-42574): the
// embeddings and overrides U+202A..U+202E, the isolates U+2066..U+2069, and the marks U+200E,
// U+200F and U+061C. Shown raw, one in a host name makes the rest of the line read backwards.
bool bidiControl(char32_t point) {
  return (point >= 0x202A && point <= 0x202E) || (point >= 0x2066 && point <= 0x2069) ||
         point == 0x200E || point == 0x200F || point == 0x061C;
}

// A C1 control (U+0080..U+009F, which terminals act on like ESC sequences) or a bidi control:
// the non-ASCII characters that printable() and printableJson() escape.
bool unsafeAboveAscii(char32_t point) {
  return (point >= 0x80 && point <= 0x9F) || bidiControl(point);
}

void appendCodePointEscape(std::string& out, char32_t point) {
  char escaped[7];
  std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(point));
  out += escaped;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      appendEscaped(out, byte);
    } else if (byte < 0x80) {
      out += c;
    } else {
      const std::size_t length = sequenceLength(text, i);
      // C1 controls act on terminals too: U+0080..U+009F (C2 80..C2 9F), and any byte that is
      // not UTF-8 (an 8-bit terminal reads 0x80..0x9F as them). A bidi control is shown as its
      // code point.
      const char32_t point = length == 0 ? 0 : codePoint(text, i, length);
      if (length == 0 || (point >= 0x80 && point <= 0x9F)) {
        for (std::size_t k = 0; k < std::max<std::size_t>(length, 1); ++k) {
          appendEscaped(out, static_cast<unsigned char>(text[i + k]));
        }
        i += std::max<std::size_t>(length, 1);
        continue;
      }
      if (bidiControl(point)) {
        appendCodePointEscape(out, point);
        i += length;
        continue;
      }
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    ++i;
  }
  return out;
}

std::string printablePrefix(std::string_view text, std::size_t limit) {
  return printable(text.substr(0, limit));
}

std::string validUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (const std::size_t length = sequenceLength(text, i); length != 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string printableJson(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  std::size_t i = 0;
  while (i < json.size()) {
    const auto byte = static_cast<unsigned char>(json[i]);
    if (byte == 0x7f) {
      appendCodePointEscape(out, byte);
      ++i;
    } else if (byte < 0x80) {
      out += json[i];  // C0 controls are escaped by every JSON writer; outside strings, whitespace
      ++i;
    } else if (const std::size_t length = sequenceLength(json, i); length == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      const char32_t point = codePoint(json, i, length);
      if (unsafeAboveAscii(point)) {
        appendCodePointEscape(out, point);
      } else {
        out.append(json.substr(i, length));
      }
      i += length;
    }
  }
  return out;
}

std::string withoutUserinfo(std::string_view address) {
  const auto at = address.rfind('@');
  if (at == std::string_view::npos) return std::string(address);
  // A scheme is a letter then letters, digits, '+', '-' or '.' (RFC 3986); "://" after anything
  // else is part of the user information.
  std::size_t start = 0;
  const auto separator = address.find("://");
  if (separator != std::string_view::npos && separator > 0 && separator < at) {
    const std::string_view scheme = address.substr(0, separator);
    const auto isAlpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    const bool isScheme =
        isAlpha(scheme.front()) && std::all_of(scheme.begin(), scheme.end(), [&](char c) {
          return isAlpha(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
        });
    if (isScheme) start = separator + 3;
  }
  return std::string(address.substr(0, start)) + "***" + std::string(address.substr(at));
}

}  // namespace ddprun::common
