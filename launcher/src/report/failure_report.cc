#include "report/failure_report.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "ddprun/common/safe_files.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using common::validUtf8;
using nlohmann::json;

constexpr const char* kNotAvailable = "<N/A>";
constexpr const char* kNoTracebackHint =
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
constexpr std::size_t kMaxSummaryWidth = 60;  // torchrun caps its borders at 60 columns

// Error files write the timestamp as a string of whole seconds ("1763776719"); older writers and
// other tools use a number. Anything else counts as absent.
std::optional<double> parseTimestamp(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(text.c_str(), &end);
    if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(seconds)) {
      return std::nullopt;
    }
    return seconds;
  }
  return std::nullopt;
}

std::string textOf(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// Python's len(): what torchrun measures its border width with.
std::size_t codePoints(std::string_view line) {
  return static_cast<std::size_t>(std::count_if(line.begin(), line.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// The summary's rule for text from outside the agent: a worker's message and traceback (from its
// error file, or from another node's stop record, which whoever can write the store may have
// forged), its stack and stderr lines, host names. A multi-line field keeps its line breaks, as
// torchrun lays it out (and indentContinuation() indents every line after the first, so none
// starts where the agent's own lines do); every other control character is escaped as
// common::printable escapes it (ESC, CR, BEL, tab, ...), so that no field can move the cursor,
// clear the screen or retitle the terminal. A one-line field keeps no line break either.
std::string multiLineField(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (;;) {
    const std::size_t newline = text.find('\n');
    out += common::printable(text.substr(0, newline));
    if (newline == std::string_view::npos) return out;
    out += '\n';
    text.remove_prefix(newline + 1);
  }
}

std::string oneLineField(std::string_view text) { return common::printable(text); }

// Replaces every "\n" with "\n  ", as torchrun does to indent a traceback under its entry.
std::string indentContinuation(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

std::string localTimeText(double epochSeconds) {
  // torchrun truncates to whole seconds before formatting (its timestamps are ints).
  const std::time_t seconds = static_cast<std::time_t>(epochSeconds);
  std::tm parts{};
  if (localtime_r(&seconds, &parts) == nullptr) return kNotAvailable;
  char buffer[64];
  if (std::strftime(buffer, sizeof buffer, "%Y-%m-%d_%H:%M:%S", &parts) == 0) return kNotAvailable;
  return buffer;
}

// The "traceback :" value of a summary entry (torchrun's ProcessFailure.message rules).
std::string tracebackText(const WorkerFailure& failure) {
  if (!failure.traceback.empty()) return indentContinuation(multiLineField(failure.traceback));
  if (!failure.message.empty()) return indentContinuation(multiLineField(failure.message));
  if (failure.errorFileFound) return kNotAvailable;  // a file without message or callstack
  if (failure.signal != 0) {
    return statusText(failure) + " received by PID " + std::to_string(failure.pid);
  }
  return kNoTracebackHint;
}

// torchrun's exit code column: negative for a signal (Python's Popen.returncode).
int torchExitCode(const WorkerFailure& failure) {
  return failure.signal != 0 ? -failure.signal : failure.exitCode;
}

// How many stderr lines an entry quotes.
constexpr std::size_t kSummaryStderrLines = 10;

// Lines as one indented block: the first after "name : ", the others aligned under it. Each is
// one line of the worker's output or stacks: a one-line field.
std::string block(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + oneLineField(line);
  return indentContinuation(text);
}

// What an entry says beyond torchrun's columns: why the agent stopped it, an OOM kill, where it
// was, and its last stderr lines (when no error file told the story already).
struct EntryExtras {
  std::string traceback;   // the traceback column
  std::string stderrText;  // "" = no stderr line
};

std::string formatEntry(std::size_t index, const WorkerFailure& failure,
                        const EntryExtras& extras) {
  std::ostringstream out;
  out << '[' << index << "]:\n"
      << "  time      : " << localTimeText(failureTime(failure)) << '\n'
      << "  host      : " << oneLineField(failure.host) << '\n'
      << "  rank      : " << failure.rank << " (local_rank: " << failure.localRank << ")\n"
      << "  exitcode  : " << torchExitCode(failure) << " (pid: " << failure.pid << ")\n"
      << "  error_file: "
      << (failure.errorFileFound && !failure.errorFile.empty() ? oneLineField(failure.errorFile)
                                                               : kNotAvailable)
      << '\n'
      << "  traceback : " << extras.traceback;
  // A --fail-pattern line is the worker's own verdict on itself, not a hang.
  if (failure.hang == HangKind::kFailPattern)
    out << "\n  failed    : " << oneLineField(failure.hangDetail);
  else if (failure.hang != HangKind::kNone)
    out << "\n  hung      : " << oneLineField(failure.hangDetail);
  if (!failure.oom.empty()) out << "\n  oom       : " << oneLineField(failure.oom);
  if (!failure.stack.empty()) {
    out << "\n  stack     : " << block(failure.stack);
    if (!failure.evidenceFile.empty()) {
      out << "\n              (every thread: " << oneLineField(failure.evidenceFile) << ")";
    }
  }
  if (!failure.flightRecorderDump.empty() || !failure.flightRecorderNote.empty()) {
    std::vector<std::string> lines;
    if (!failure.flightRecorderDump.empty()) lines.push_back(failure.flightRecorderDump);
    if (!failure.flightRecorderNote.empty()) lines.push_back(failure.flightRecorderNote);
    out << "\n  fr_dump   : " << block(lines);
  }
  if (!extras.stderrText.empty()) out << "\n  stderr    : " << extras.stderrText;
  return out.str();
}

// The last stderr lines an entry quotes ("" = none): only when no error file gave a traceback
// (with one, stderr ends with the same traceback).
std::string stderrQuote(const WorkerFailure& failure) {
  if (failure.stderrTail.empty() || !failure.traceback.empty()) return {};
  const std::size_t from = failure.stderrTail.size() > kSummaryStderrLines
                               ? failure.stderrTail.size() - kSummaryStderrLines
                               : 0;
  return block(
      {failure.stderrTail.begin() + static_cast<std::ptrdiff_t>(from), failure.stderrTail.end()});
}

// Ranks as "1, 2, 5".
std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

// Many ranks failing alike (one exception raised everywhere) print it once: the entry that shows
// a text names the ranks that had the same, and theirs refer to it. The root cause always shows
// its own; otherwise the lowest rank does.
void shareIdentical(const std::vector<WorkerFailure>& failures,
                    const std::vector<std::size_t>& order, std::size_t root,
                    std::vector<EntryExtras>& extras, std::string EntryExtras::*field,
                    const char* what) {
  std::map<std::string, std::vector<std::size_t>> alike;  // text -> failures, in rank order
  for (std::size_t i : order) {
    const std::string& text = extras[i].*field;
    if (!text.empty() && text != kNotAvailable && text != kNoTracebackHint)
      alike[text].push_back(i);
  }
  for (auto& [text, members] : alike) {
    if (members.size() < 2) continue;
    auto shower = std::find(members.begin(), members.end(), root);
    const std::size_t shown = shower != members.end() ? root : members.front();
    std::vector<int> ranks;
    for (std::size_t i : members) ranks.push_back(failures[i].rank);
    for (std::size_t i : members) {
      if (i == shown) {
        extras[i].*field +=
            fmt::format("\n              (the same {} from ranks {})", what, rankList(ranks));
      } else {
        extras[i].*field = fmt::format("the same as rank {}'s", failures[shown].rank);
      }
    }
  }
}

std::size_t widestLine(const std::string& text) {
  std::size_t widest = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    widest = std::max(widest, codePoints(std::string_view(text).substr(start, end - start)));
    start = end + 1;
  }
  return widest;
}

// A worker's error file is the worker's to write, and whatever it runs can put anything at that
// name: a link to any file on the node, a FIFO, gigabytes. So it is read without following a
// link, without waiting on a FIFO, and no further than this: an error file holds a message and a
// traceback (kilobytes; torch writes nothing else there), and a larger one is not read at all.
constexpr std::size_t kErrorFileLimit = 4u << 20;

std::string errorFileLimitText() { return fmt::format("{} MiB", kErrorFileLimit >> 20); }

// What reading a worker's error file gave: its text, that there is none (torchrun's
// os.path.isfile is false: no name, or a directory), or why it was not read.
struct ErrorFileRead {
  enum class Outcome { kRead, kNone, kNotRead };
  Outcome outcome = Outcome::kNone;
  std::string text;  // kRead: the file; kNotRead: why ("is a FIFO, not a regular file")
};

ErrorFileRead readErrorFile(const std::string& path) {
  auto read = common::readFile(path, {kErrorFileLimit, 0, common::Links::kRefuse});
  if (read && read->truncated) {
    return {ErrorFileRead::Outcome::kNotRead,
            "is larger than " + errorFileLimitText() + ": not read"};
  }
  if (read) return {ErrorFileRead::Outcome::kRead, std::move(read->bytes)};
  const common::FileError& error = read.error();
  const bool absent = error.problem == common::FileProblem::kSystem &&
                      (error.error == ENOENT || error.error == ENOTDIR);
  const bool directory = error.problem == common::FileProblem::kNotRegular &&
                         error.kind == common::FileKind::kDirectory;
  if (absent || directory) return {ErrorFileRead::Outcome::kNone, {}};
  return {ErrorFileRead::Outcome::kNotRead, error.describe() + ": not read"};
}

// The synthesized message of a failure that left no error file behind.
std::string synthesizedMessage(const WorkerFailure& failure) {
  if (!failure.message.empty()) return failure.message;
  if (failure.signal != 0) return tracebackText(failure);  // "Signal N (SIG...) received by PID p"
  return "worker rank " + std::to_string(failure.rank) + " (local_rank " +
         std::to_string(failure.localRank) + ", pid " + std::to_string(failure.pid) + ") on " +
         (failure.host.empty() ? std::string("?") : failure.host) + " failed with " +
         statusText(failure);
}

// The parent's error file is replaced through a new file under a random name beside it and a
// rename (common::writeFileAtomically): its directory may be a shared one (/tmp), where a
// guessable temporary name could have been planted as a link to any file. Mode 0644, as Python's
// open() makes torch's own error files (0666 less the usual umask): the parent may be another
// launcher, and the file holds what the worker's error file held.
void writeParentErrorFile(const std::string& path, const std::string& content) {
  if (auto problem = common::writeFileAtomically(path, content, 0644)) {
    throw std::system_error(problem->code(), "cannot write " + path);
  }
}

}  // namespace

WorkerFailure fromWaitStatus(int waitStatus, const WorkerIdentity& who, double observedAt) {
  WorkerFailure failure;
  failure.rank = who.rank;
  failure.localRank = who.localRank;
  failure.groupRank = who.groupRank;
  failure.host = who.host;
  failure.pid = who.pid;
  failure.errorFile = who.errorFile;
  failure.observedAt = observedAt;
  if (WIFEXITED(waitStatus)) {
    failure.exitCode = WEXITSTATUS(waitStatus);
  } else if (WIFSIGNALED(waitStatus)) {
    failure.signal = WTERMSIG(waitStatus);
  } else {
    throw std::invalid_argument("wait status " + std::to_string(waitStatus) +
                                " is not a termination");
  }
  return failure;
}

bool loadErrorFile(WorkerFailure& failure) {
  if (failure.errorFile.empty()) return false;
  // torchrun checks os.path.isfile: a directory or a dangling name is "no file". One open decides
  // (no check that a swap could race): anything else that is there is found, and what cannot be
  // read (a link, a FIFO, a file over the limit) says so as its message.
  ErrorFileRead read = readErrorFile(failure.errorFile);
  if (read.outcome == ErrorFileRead::Outcome::kNone) return false;
  failure.errorFileFound = true;
  failure.message.clear();
  failure.traceback.clear();
  failure.errorTimestamp.reset();
  if (read.outcome == ErrorFileRead::Outcome::kNotRead) {
    failure.message = "<error file " + failure.errorFile + " " + read.text + ">";
    return true;
  }
  try {
    const json data = json::parse(read.text);
    if (!data.is_object() || !data.contains("message")) {
      throw std::runtime_error("no \"message\" key");
    }
    const json& message = data["message"];
    if (message.is_object()) {
      if (message.contains("message")) failure.message = textOf(message["message"]);
      if (auto info = message.find("extraInfo"); info != message.end() && info->is_object()) {
        if (auto stack = info->find("py_callstack"); stack != info->end() && !stack->is_null()) {
          failure.traceback = textOf(*stack);
        }
        if (auto stamp = info->find("timestamp"); stamp != info->end()) {
          failure.errorTimestamp = parseTimestamp(*stamp);
        }
      }
    } else {
      // Legacy schema: the message is the text, the timestamp sits beside it.
      failure.message = textOf(message);
      if (auto stamp = data.find("timestamp"); stamp != data.end()) {
        failure.errorTimestamp = parseTimestamp(*stamp);
      }
    }
  } catch (const std::exception& error) {
    failure.message =
        "<error file " + failure.errorFile + " could not be parsed: " + error.what() + ">";
  }
  return true;
}

double failureTime(const WorkerFailure& failure) {
  return failure.errorTimestamp.value_or(failure.observedAt);
}

std::string statusText(const WorkerFailure& failure) {
  if (failure.signal != 0) {
    const std::string name = common::signalName(failure.signal);
    return "Signal " + std::to_string(failure.signal) + " (" + name + ")";
  }
  return "exitcode " + std::to_string(failure.exitCode);
}

std::size_t rootCauseIndex(const std::vector<WorkerFailure>& failures) {
  if (failures.empty()) throw std::invalid_argument("rootCauseIndex: no failures");
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    const double time = failureTime(failures[i]);
    const double bestTime = failureTime(failures[best]);
    if (time < bestTime || (time == bestTime && failures[i].rank < failures[best].rank)) best = i;
  }
  return best;
}

std::string formatSummary(const std::string& entrypoint, const std::vector<WorkerFailure>& failures,
                          std::optional<std::size_t> rootCause) {
  if (failures.empty()) throw std::invalid_argument("formatSummary: no failures");
  const std::size_t root = rootCause.value_or(rootCauseIndex(failures));
  if (root >= failures.size()) throw std::invalid_argument("formatSummary: bad root cause index");

  std::vector<std::size_t> order(failures.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return failures[a].rank < failures[b].rank;
  });

  std::vector<EntryExtras> extras(failures.size());
  for (std::size_t i = 0; i < failures.size(); ++i) {
    extras[i] = {tracebackText(failures[i]), stderrQuote(failures[i])};
  }
  shareIdentical(failures, order, root, extras, &EntryExtras::traceback, "traceback");
  shareIdentical(failures, order, root, extras, &EntryExtras::stderrText, "stderr lines");

  const std::string title = entrypoint + " FAILED";
  std::size_t width = codePoints(title);
  std::string rootText;
  std::string others;
  for (std::size_t position = 0; position < order.size(); ++position) {
    const std::string entry =
        formatEntry(position, failures[order[position]], extras[order[position]]);
    width = std::max(width, widestLine(entry));
    if (order[position] == root) {
      rootText = entry;
    } else {
      if (!others.empty()) others += '\n';
      others += entry;
    }
  }
  if (others.empty()) others = "  <NO_OTHER_FAILURES>";
  width = std::min(width, kMaxSummaryWidth);

  const std::string border(width, '=');
  const std::string section(width, '-');
  return border + '\n' + title + '\n' + section + "\nFailures:\n" + others + '\n' + section +
         "\nRoot Cause (first observed failure):\n" + rootText + '\n' + border;
}

void propagateErrorFile(const WorkerFailure& rootCause, const std::string& parentErrorFile) {
  if (parentErrorFile.empty()) return;
  const int errorCode = torchExitCode(rootCause);

  // Prefer the worker's own file, copied whole (unknown keys included), as torchrun does.
  std::optional<json> data;
  if (rootCause.errorFileFound && !rootCause.errorFile.empty()) {
    // Read again as loadErrorFile reads it (the worker's processes may have changed it since).
    ErrorFileRead read = readErrorFile(rootCause.errorFile);
    try {
      if (read.outcome == ErrorFileRead::Outcome::kRead) {
        json parsed = json::parse(read.text);
        if (parsed.is_object() && parsed.contains("message")) data = std::move(parsed);
      }
    } catch (const std::exception&) {
      // Unreadable here (or written on another node): synthesize below.
    }
  }
  if (data) {
    // torchrun leaves the legacy string schema alone (nowhere to put the code).
    if ((*data)["message"].is_object() && errorCode != 0) {
      (*data)["message"]["errorCode"] = errorCode;
    }
  } else {
    json extraInfo{{"timestamp", std::to_string(static_cast<long long>(failureTime(rootCause)))}};
    if (!rootCause.traceback.empty()) extraInfo["py_callstack"] = validUtf8(rootCause.traceback);
    data = json{{"message",
                 {{"message", validUtf8(synthesizedMessage(rootCause))},
                  {"extraInfo", extraInfo},
                  {"errorCode", errorCode}}}};
  }
  writeParentErrorFile(parentErrorFile, data->dump());
}

}  // namespace ddprun::launcher
