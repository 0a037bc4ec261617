// ConsoleLines: the shape of the text on one console that several writers share (the workers'
// streams, the agent's own log). No I/O: the ConsoleWriter frames each piece with it, in the order
// the pieces are queued, which is the order they reach the console.
//
// A worker's text may end without '\n' (a progress bar drawn with '\r', a prompt, a line the
// agent stopped holding back): that source's line is then "open" on the console. Rules:
//   - A piece from any other source first ends the open line with '\n', so no two sources ever
//     share a console line; the open source's next piece then starts on a line of its own, with
//     its prefix again (its line continues, split in two).
//   - A source's line starts with its prefix (an empty line too: "[default0]:\n").
//   - A '\r' inside a source's line is followed by the prefix again, so a bar redrawn over its
//     own line keeps the prefix in front ("\r 40%|####" -> "\r[default0]: 40%|####"). A '\r' at the
//     very start of a line (the cursor is already in column 0) is written alone, and "\r\n" ends
//     the line as it is, so a CRLF line gets no stray prefix after its '\r'.
//   - Text with no source (the agent's log lines, whole lines) only ends the open line first.
//
// Thread safety: none; the ConsoleWriter calls it under its lock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class ConsoleLines {
 public:
  // A process-wide unique id for a source of text (one worker stream, or one merged channel).
  static std::uint64_t newSource();

  // `text` of `source`, framed: appended to `out`.
  void frame(std::uint64_t source, std::string_view prefix, std::string_view text,
             std::string& out);
  // Whole lines with no source (the agent's own): appended to `out` after ending the open line.
  void frameUnsourced(std::string_view text, std::string& out);
  // The source whose line is open (0: none).
  std::uint64_t openSource() const { return open_; }

 private:
  // Where the open source's line stands (only the open source's; every other source is at the
  // start of a line).
  enum class At { kLineStart, kInLine, kAfterReturn };

  void endOpenLine(std::string& out);

  std::uint64_t open_ = 0;
  At at_ = At::kLineStart;
};

}  // namespace ddprun::launcher
