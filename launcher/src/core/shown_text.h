// Text from outside the agent as a log line or a one-line error shows it: names and values read
// from the rendezvous store (which anyone who reaches it writes when the job has no token: node
// and stop records, key names, the round's records), and what a worker chose (a FileTimer
// request, its messages, its stacks). Such bytes are escaped where they go into a message, once:
// a value keeps its raw bytes (comparisons, JSON, the store), and a message built from escaped
// parts is not escaped again. Not a filter on the log's sink: the workers' own output passes
// through the agent unchanged (docs/security.md, "On the node").
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ddprun/common/text.h"

namespace ddprun::launcher {

// `text` with its control characters escaped (common::printable: "\n", "\x1b", ...), so that it
// cannot end the line and start a forged one nor reach a terminal as an escape sequence; its
// first common::kShownBytes bytes only, "..." after them when it was longer. Cut before escaping,
// so an escape is never split.
inline std::string shown(std::string_view text) {
  return common::printablePrefix(text) + (text.size() > common::kShownBytes ? "..." : "");
}

// shown(text) in double quotes: a value quoted in a message.
inline std::string quotedValue(std::string_view text) { return "\"" + shown(text) + "\""; }

}  // namespace ddprun::launcher
