// How a store key is shown in a message: one way for every store, client and server.
#pragma once

#include <string>
#include <string_view>

namespace ddprun::common {

// A store key as a message (a log line, an exception's what()) shows it: 'in quotes', its first
// kShownBytes bytes escaped (text.h's printablePrefix), then "... (N bytes)" when it was cut.
// Whoever reaches a store without a token chooses the key names it holds, so a name must never
// end a log line and start a forged one, nor reach a terminal as an escape sequence.
std::string shownKey(std::string_view key);

}  // namespace ddprun::common
