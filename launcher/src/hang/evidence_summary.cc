// What a hung worker's evidence says: all of it for the file in the log directory (text()), and
// the few lines that tell the most for the failure summary (summary()).
#include <fmt/format.h>

#include <algorithm>

#include "hang/evidence_parts.h"
#include "hang/hang_evidence.h"

namespace ddprun::launcher {

namespace {

using evidence::splitLines;
using evidence::trimmed;

struct Block {
  std::string header;
  std::vector<std::string> lines;
};

// Splits a dump into one block per thread: a header line (accepted by `isHeader`), then its
// frames; blank lines are dropped.
template <typename IsHeader>
std::vector<Block> threadBlocks(const std::string& text, IsHeader&& isHeader) {
  std::vector<Block> blocks;
  for (const std::string& raw : splitLines(text)) {
    if (trimmed(raw).empty()) continue;
    if (isHeader(raw) || blocks.empty()) {
      blocks.push_back({});
      if (isHeader(raw)) {
        blocks.back().header = raw;
        continue;
      }
    }
    blocks.back().lines.push_back(raw);
  }
  return blocks;
}

// At most `maxLines` lines of `blocks`: every block's header with at least its top frame, and
// further frames handed out a round at a time (the top of each stack tells the most). Blocks
// that do not fit are counted in a last line.
std::vector<std::string> fitBlocks(const std::vector<Block>& blocks, std::size_t maxLines) {
  std::vector<std::string> out;
  if (maxLines == 0 || blocks.empty()) return out;
  std::size_t total = 0;
  for (const Block& block : blocks) total += (block.header.empty() ? 0 : 1) + block.lines.size();
  std::vector<std::size_t> frames(blocks.size(), 0);
  std::size_t shown = blocks.size();
  if (total > maxLines) {
    // How many blocks get their header and a frame; if not all, one line says how many are left.
    std::size_t used = 0;
    shown = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::size_t cost =
          (blocks[i].header.empty() ? 0 : 1) + std::min<std::size_t>(1, blocks[i].lines.size());
      const std::size_t reserve = i + 1 < blocks.size() ? 1 : 0;  // the "... more" line
      if (used + cost + reserve > maxLines) break;
      used += cost;
      frames[i] = std::min<std::size_t>(1, blocks[i].lines.size());
      ++shown;
    }
    if (shown == 0) {
      // Not even one thread's header and top frame fit with the "... more" line: the first
      // thread's top lines alone.
      if (!blocks[0].header.empty()) out.push_back(blocks[0].header);
      for (const std::string& line : blocks[0].lines) {
        if (out.size() >= maxLines) break;
        out.push_back(line);
      }
      out.resize(std::min(out.size(), maxLines));
      return out;
    }
    std::size_t budget = maxLines - std::min(maxLines, used + (shown < blocks.size() ? 1 : 0));
    for (bool progress = true; budget > 0 && progress;) {
      progress = false;
      for (std::size_t i = 0; i < shown && budget > 0; ++i) {
        if (frames[i] < blocks[i].lines.size()) {
          ++frames[i];
          --budget;
          progress = true;
        }
      }
    }
  } else {
    for (std::size_t i = 0; i < blocks.size(); ++i) frames[i] = blocks[i].lines.size();
  }
  for (std::size_t i = 0; i < shown; ++i) {
    if (!blocks[i].header.empty() && out.size() < maxLines) out.push_back(blocks[i].header);
    for (std::size_t f = 0; f < frames[i] && out.size() < maxLines; ++f) {
      out.push_back(blocks[i].lines[f]);
    }
  }
  if (shown < blocks.size() && out.size() < maxLines) {
    out.push_back(fmt::format("... and {} more thread{}", blocks.size() - shown,
                              blocks.size() - shown == 1 ? "" : "s"));
  }
  return out;
}

std::string shortened(const std::string& line, std::size_t width = 240) {
  if (line.size() <= width) return line;
  return line.substr(0, width - 3) + "...";
}

std::string threadLine(const ThreadView& thread) {
  std::string wait = thread.waitChannel;
  if (wait.empty() || wait == "0") wait = "-";
  return fmt::format("tid {} {} {} {}", thread.tid, thread.name.empty() ? "?" : thread.name,
                     thread.state, wait);
}

}  // namespace

std::string HangEvidence::text() const {
  std::string out;
  out += fmt::format("=== Where process {} is ===\n", pid);
  out +=
      fmt::format("\n--- Threads ({}), as the kernel sees them: tid name state wait-channel ---\n",
                  threads.size());
  if (threads.empty()) out += "(none)\n";
  for (const ThreadView& thread : threads) {
    out += threadLine(thread);
    out += '\n';
    for (const std::string& frame : thread.kernelStack) out += "    " + frame + "\n";
  }
  out += "\n--- Python stacks (faulthandler), most recent call first ---\n";
  out += pythonStack.empty() ? "(none)\n" : pythonStack;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "\n--- Native stacks (debugger: eu-stack or gdb) ---\n";
  if (nativeStack.empty()) {
    out += "(none)\n";
  } else {
    bool first = true;
    for (const std::string& line : splitLines(nativeStack)) {
      if (isNativeThreadHeader(line) && !first) out += '\n';
      first = false;
      out += line;
      out += '\n';
    }
  }
  if (flightRecorder) {
    out += "\n--- PyTorch Flight Recorder ---\n";
    const std::vector<std::string> lines = flightRecorderSummary(*flightRecorder);
    if (lines.empty()) out += "(none)\n";
    for (const std::string& line : lines) out += line + "\n";
  }
  if (!notes.empty()) {
    out += "\n--- Notes ---\n";
    for (const std::string& note : notes) out += "- " + note + "\n";
  }
  return out;
}

std::vector<std::string> HangEvidence::summary(std::size_t maxLines) const {
  std::vector<std::string> lines;
  if (maxLines == 0) return lines;
  if (!trimmed(pythonStack).empty()) {
    auto blocks = threadBlocks(pythonStack, [](const std::string& line) {
      return line.rfind("Thread 0x", 0) == 0 || line.rfind("Current thread 0x", 0) == 0;
    });
    // The main thread first: its stack ends in the script's "<module>".
    std::stable_partition(blocks.begin(), blocks.end(), [](const Block& block) {
      return !block.lines.empty() && block.lines.back().find("in <module>") != std::string::npos;
    });
    lines = fitBlocks(blocks, maxLines);
  } else if (!trimmed(nativeStack).empty()) {
    auto blocks = threadBlocks(nativeStack,
                               [](const std::string& line) { return isNativeThreadHeader(line); });
    // gdb lists the threads last to first: the main thread ("Thread 1 ") first (eu-stack lists
    // it first already).
    std::stable_partition(blocks.begin(), blocks.end(), [](const Block& block) {
      return block.header.rfind("Thread 1 ", 0) == 0;
    });
    lines = fitBlocks(blocks, maxLines);
  } else {
    for (const ThreadView& thread : threads) {
      if (lines.size() + 1 == maxLines && threads.size() > maxLines) {
        lines.push_back(fmt::format("... and {} more threads", threads.size() - lines.size()));
        break;
      }
      lines.push_back(threadLine(thread));
    }
    if (lines.empty() && !notes.empty()) lines.push_back(notes.front());
  }
  for (std::string& line : lines) line = shortened(line);
  return lines;
}

}  // namespace ddprun::launcher
