#include "core/worker_failure.h"

#include <stdexcept>

#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using common::validUtf8;
using nlohmann::json;

// Keeps the tail (where a traceback names the exception), cut on a character boundary.
std::string capped(const std::string& text) {
  if (text.size() <= kMaxJsonText) return text;
  const std::string marker =
      "[ddprun: " + std::to_string(text.size()) + " bytes, only the last ones kept]\n";
  std::size_t start = text.size() - (kMaxJsonText - marker.size());
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  return marker + text.substr(start);
}

// Lines that travel between agents: at most kMaxJsonLines of at most kMaxJsonLineBytes each (the
// last ones: they are the telling ones), valid UTF-8.
constexpr std::size_t kMaxJsonLines = 40;
constexpr std::size_t kMaxJsonLineBytes = 512;
json cappedLines(const std::vector<std::string>& lines) {
  json result = json::array();
  const std::size_t from = lines.size() > kMaxJsonLines ? lines.size() - kMaxJsonLines : 0;
  for (std::size_t i = from; i < lines.size(); ++i) {
    result.push_back(validUtf8(lines[i].substr(0, kMaxJsonLineBytes)));
  }
  return result;
}

}  // namespace

const char* hangKindName(HangKind kind) {
  switch (kind) {
    case HangKind::kNone:
      return "none";
    case HangKind::kNoProgress:
      return "no_progress";
    case HangKind::kNoFirstProgress:
      return "no_first_progress";
    case HangKind::kAtExit:
      return "at_exit";
    case HangKind::kFileTimer:
      return "file_timer";
    case HangKind::kNoStart:
      return "no_start";
    case HangKind::kFailPattern:
      return "fail_pattern";
  }
  return "none";
}

std::optional<HangKind> hangKindFromName(const std::string& name) {
  for (HangKind kind :
       {HangKind::kNone, HangKind::kNoProgress, HangKind::kNoFirstProgress, HangKind::kAtExit,
        HangKind::kFileTimer, HangKind::kNoStart, HangKind::kFailPattern}) {
    if (name == hangKindName(kind)) return kind;
  }
  return std::nullopt;
}

int exitCodeOf(const WorkerFailure& failure) {
  return failure.signal != 0 ? 128 + failure.signal : failure.exitCode;
}

json toJson(const WorkerFailure& failure) {
  json value{
      {"rank", failure.rank},
      {"localRank", failure.localRank},
      {"groupRank", failure.groupRank},
      {"host", validUtf8(failure.host)},
      {"pid", failure.pid},
      {"exitCode", failure.exitCode},
      {"signal", failure.signal},
      {"observedAt", failure.observedAt},
      {"errorFile", validUtf8(failure.errorFile)},
      {"errorFileFound", failure.errorFileFound},
      {"message", capped(validUtf8(failure.message))},
      {"traceback", capped(validUtf8(failure.traceback))},
      {"errorTimestamp", nullptr},
      {"hang", hangKindName(failure.hang)},
      {"hangDetail", validUtf8(failure.hangDetail)},
      {"oom", validUtf8(failure.oom)},
      {"stack", cappedLines(failure.stack)},
      {"evidenceFile", validUtf8(failure.evidenceFile)},
      {"flightRecorderDump", validUtf8(failure.flightRecorderDump)},
      {"flightRecorderNote", validUtf8(failure.flightRecorderNote)},
      {"stderrTail", cappedLines(failure.stderrTail)},
  };
  if (failure.errorTimestamp) value["errorTimestamp"] = *failure.errorTimestamp;
  if (failure.startFault) {
    value["startFault"] = {{"errno", failure.startFault->error},
                           {"exec", failure.startFault->exec}};
  }
  value["progress"] = failure.progress;
  if (failure.hungAt) value["hungAt"] = *failure.hungAt;
  if (failure.silentSince) value["silentSince"] = *failure.silentSince;
  return value;
}

WorkerFailure failureFromJson(const json& value) {
  if (!value.is_object()) throw std::invalid_argument("a worker failure must be a JSON object");
  WorkerFailure failure;
  failure.rank = value.value("rank", failure.rank);
  failure.localRank = value.value("localRank", failure.localRank);
  failure.groupRank = value.value("groupRank", failure.groupRank);
  failure.host = value.value("host", failure.host);
  failure.pid = value.value("pid", failure.pid);
  failure.exitCode = value.value("exitCode", failure.exitCode);
  failure.signal = value.value("signal", failure.signal);
  failure.observedAt = value.value("observedAt", failure.observedAt);
  failure.errorFile = value.value("errorFile", failure.errorFile);
  failure.errorFileFound = value.value("errorFileFound", failure.errorFileFound);
  failure.message = value.value("message", failure.message);
  failure.traceback = value.value("traceback", failure.traceback);
  if (auto stamp = value.find("errorTimestamp"); stamp != value.end() && stamp->is_number()) {
    failure.errorTimestamp = stamp->get<double>();
  }
  failure.hang =
      hangKindFromName(value.value("hang", std::string("none"))).value_or(HangKind::kNone);
  failure.hangDetail = value.value("hangDetail", failure.hangDetail);
  if (auto at = value.find("hungAt"); at != value.end() && at->is_number()) {
    failure.hungAt = at->get<double>();
  }
  if (auto at = value.find("silentSince"); at != value.end() && at->is_number()) {
    failure.silentSince = at->get<double>();
  }
  failure.oom = value.value("oom", failure.oom);
  failure.stack = value.value("stack", failure.stack);
  failure.evidenceFile = value.value("evidenceFile", failure.evidenceFile);
  failure.flightRecorderDump = value.value("flightRecorderDump", failure.flightRecorderDump);
  failure.flightRecorderNote = value.value("flightRecorderNote", failure.flightRecorderNote);
  failure.stderrTail = value.value("stderrTail", failure.stderrTail);
  if (auto fault = value.find("startFault"); fault != value.end() && fault->is_object()) {
    failure.startFault =
        WorkerFailure::StartFault{fault->value("errno", 0), fault->value("exec", false)};
  }
  failure.progress = value.value("progress", failure.progress);
  return failure;
}

}  // namespace ddprun::launcher
