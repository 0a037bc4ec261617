#include "core/stop_reason.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/shown_text.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {

using nlohmann::json;

namespace {

// The names on the wire (and in --event-log-handler output): kept from the first version of the
// stop record so that agents of one job agree whatever order they were upgraded in.
constexpr struct {
  StopKind kind;
  const char* name;
} kNames[] = {
    {StopKind::kWorkerFailed, "failure"},
    {StopKind::kNodeLost, "node_lost"},
    {StopKind::kNodeJoined, "node_joined"},
    {StopKind::kNodeLeft, "node_left"},
    {StopKind::kDone, "done"},
    {StopKind::kStoreLost, "store_lost"},
    {StopKind::kSignalled, "signalled"},
};

}  // namespace

const char* stopKindName(StopKind kind) {
  for (const auto& entry : kNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "unknown";
}

StopReason StopReason::workerFailed(WorkerFailure failure, std::int64_t node) {
  StopReason stop;
  stop.kind = StopKind::kWorkerFailed;
  stop.node = node;
  stop.groupRank = failure.groupRank;
  stop.host = failure.host;
  stop.failure = std::move(failure);
  return stop;
}

StopReason StopReason::nodeLost(std::int64_t node, int groupRank, std::string host) {
  StopReason stop;
  stop.kind = StopKind::kNodeLost;
  stop.node = node;
  stop.groupRank = groupRank;
  stop.host = std::move(host);
  return stop;
}

StopReason StopReason::nodeJoined(std::int64_t node, std::string host) {
  StopReason stop;
  stop.kind = StopKind::kNodeJoined;
  stop.node = node;
  stop.host = std::move(host);
  return stop;
}

StopReason StopReason::nodeLeft(std::int64_t node, int groupRank, std::string host, int signal,
                                bool storeHost) {
  StopReason stop;
  stop.storeHost = storeHost;
  stop.kind = StopKind::kNodeLeft;
  stop.node = node;
  stop.groupRank = groupRank;
  stop.host = std::move(host);
  stop.signal = signal;
  return stop;
}

StopReason StopReason::done() { return StopReason{}; }

StopReason StopReason::storeLost(std::string detail) {
  StopReason stop;
  stop.kind = StopKind::kStoreLost;
  stop.detail = std::move(detail);
  return stop;
}

StopReason StopReason::signalled(int signal) {
  StopReason stop;
  stop.kind = StopKind::kSignalled;
  stop.signal = signal;
  return stop;
}

std::string StopReason::serialize() const {
  if (kind == StopKind::kStoreLost || kind == StopKind::kSignalled) {
    throw std::logic_error(fmt::format("a {} stop is local to one agent", stopKindName(kind)));
  }
  json record{{"kind", stopKindName(kind)}};
  if (node >= 0) record["node"] = node;
  if (groupRank >= 0) record["group_rank"] = groupRank;
  if (!host.empty()) record["host"] = common::validUtf8(host);  // gethostname()'s bytes
  if (signal != 0) record["signal"] = signal;
  if (storeHost) record["store_host"] = true;
  if (failure) record["failure"] = toJson(*failure);
  return record.dump();
}

std::optional<StopReason> StopReason::parse(std::string_view text) {
  const json record = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("kind") || !record["kind"].is_string())
    return std::nullopt;
  const std::string name = record["kind"].get<std::string>();
  StopReason stop;
  bool known = false;
  for (const auto& entry : kNames) {
    if (name == entry.name) {
      stop.kind = entry.kind;
      known = true;
    }
  }
  if (!known || stop.kind == StopKind::kStoreLost || stop.kind == StopKind::kSignalled)
    return std::nullopt;
  try {
    stop.node = record.value("node", std::int64_t{-1});
    stop.groupRank = record.value("group_rank", -1);
    stop.host = record.value("host", std::string());
    stop.signal = record.value("signal", 0);
    stop.storeHost = record.value("store_host", false);
    if (stop.kind == StopKind::kWorkerFailed) {
      if (!record.contains("failure")) return std::nullopt;
      stop.failure = failureFromJson(record["failure"]);
    }
  } catch (const std::exception&) {  // a field of the wrong type
    return std::nullopt;
  }
  return stop;
}

std::string StopReason::nodeText() const {
  const std::string who =
      groupRank >= 0 ? fmt::format("node {}", groupRank) : std::string("a node");
  // The host came from the stop record, which whoever can write the store may have forged.
  return host.empty() ? who : fmt::format("{} ({})", who, shown(host));
}

}  // namespace ddprun::launcher
