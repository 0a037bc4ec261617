#include "output/console_lines.h"

#include <atomic>

namespace ddprun::launcher {

std::uint64_t ConsoleLines::newSource() {
  static std::atomic<std::uint64_t> next{1};  // 0 means "no source"
  return next.fetch_add(1, std::memory_order_relaxed);
}

void ConsoleLines::endOpenLine(std::string& out) {
  if (open_ != 0) out += '\n';
  open_ = 0;
  at_ = At::kLineStart;
}

void ConsoleLines::frameUnsourced(std::string_view text, std::string& out) {
  if (text.empty()) return;
  endOpenLine(out);
  out += text;
}

void ConsoleLines::frame(std::uint64_t source, std::string_view prefix, std::string_view text,
                         std::string& out) {
  if (text.empty()) return;
  if (open_ != source) endOpenLine(out);
  out.reserve(out.size() + text.size() + prefix.size() + 1);
  // Plain runs are copied whole; only '\n' and '\r' change where the line stands.
  std::size_t position = 0;
  while (position < text.size()) {
    const char next = text[position];
    if (next == '\r') {
      out += '\r';
      if (at_ != At::kLineStart) at_ = At::kAfterReturn;
      ++position;
      continue;
    }
    if (at_ == At::kAfterReturn && next == '\n') {
      out += '\n';
      at_ = At::kLineStart;
      ++position;
      continue;
    }
    if (at_ != At::kInLine) out += prefix;  // a line starts, or is drawn again after '\r'
    const std::size_t end = text.find_first_of("\r\n", position);
    if (end == std::string_view::npos) {
      out += text.substr(position);
      at_ = At::kInLine;
      break;
    }
    out += text.substr(position, end - position);
    if (text[end] == '\n') {
      out += '\n';
      at_ = At::kLineStart;
      position = end + 1;
    } else {
      at_ = At::kInLine;  // the '\r' is handled on the next turn
      position = end;
    }
  }
  open_ = at_ == At::kLineStart ? 0 : source;
}

}  // namespace ddprun::launcher
