// Text from outside (a user's arguments, a worker's files, bytes from the network) made safe for
// the places it goes: one-line messages and logs (printable), JSON (validUtf8 before it goes in),
// and JSON text shown to a person (printableJson).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun::common {

// Control characters escaped ("\n", "\t", "\x1b"; the C1 controls U+0080..U+009F and bytes that
// are not UTF-8 as "\xNN" each) and the bidi controls that reorder a line as shown (U+202A..U+202E,
// U+2066..U+2069, U+200E, U+200F, U+061C as "\u202e"), so that a message stays one line and a
// terminal never sees a control sequence it would act on nor shows the line's text out of order.
// Everything else (UTF-8 text included) is kept as it is.
std::string printable(std::string_view text);

// How many bytes of one outside value (a key, a host name read from a store, a worker's text) a
// log line or a one-line error quotes: enough to recognise it, too few to flood the log.
inline constexpr std::size_t kShownBytes = 200;

// printable() of the first `limit` bytes of `text`: cut before escaping, so that the cut bounds
// the raw bytes an outsider makes a message hold and an escape is never split.
std::string printablePrefix(std::string_view text, std::size_t limit = kShownBytes);

// Each byte that is not part of a well-formed UTF-8 sequence (overlong forms and surrogates
// included) replaced by U+FFFD: nlohmann::json::dump() throws on invalid UTF-8, and a message may
// hold raw bytes from a path or a worker.
std::string validUtf8(std::string_view text);

// JSON text (a dump) with each character printable() escapes that a JSON writer leaves raw (DEL,
// the C1 controls, the bidi controls) written as a \uXXXX escape, and a byte that is not UTF-8 as
// \ufffd: the same JSON value to any parser, all other UTF-8 text still readable, and printed on
// a terminal it holds no control or bidi character. The C0 controls are escaped inside strings by
// every JSON writer already and are whitespace outside them: kept as they are.
std::string printableJson(std::string_view json);

// One address as typed (a URL or HOST:PORT) with its user information, everything before its
// last '@' after "scheme://" (or from the start without a scheme), replaced by "***":
// "http://u:pw@h:2379" -> "http://***@h:2379", "u:pw@h" -> "***@h". Text without '@' comes back
// as it is. For the message that refuses such an address: a password typed into it is never
// repeated. The result is still outside text (printable() it).
std::string withoutUserinfo(std::string_view address);

}  // namespace ddprun::common
