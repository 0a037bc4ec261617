#include "report/event_log.h"

#include <cmath>

namespace ddprun::launcher {

std::string eventLine(const WorkerEvent& event) {
  // In torchrun's key order (Event's fields, then its metadata's); its "metadata" inside is itself
  // a JSON string (local_rank, role_rank...).
  using json = nlohmann::ordered_json;
  json inner = json(event.extra);
  if (event.localRank >= 0) inner["local_rank"] = event.localRank;
  json metadata{
      {"run_id", event.runId},
      {"global_rank", event.rank ? json(*event.rank) : json(nullptr)},
      {"group_rank", event.groupRank},
      {"worker_id", event.pid ? json(std::to_string(*event.pid)) : json(nullptr)},
      {"role", event.role},
      {"hostname", event.hostname},
      {"state", event.state},
      {"total_run_time", event.totalRunTime},
      {"rdzv_backend", event.rdzvBackend},
      {"raw_error",
       event.rawError.is_null()
           ? json(nullptr)
           : json(event.rawError.dump(-1, ' ', false, json::error_handler_t::replace))},
      {"metadata", inner.dump(-1, ' ', false, json::error_handler_t::replace)},
      {"agent_restarts", event.restarts},
  };
  json line{
      {"name", event.name},
      {"source", event.source},
      {"timestamp", static_cast<long long>(std::llround(event.timestamp * 1000))},  // milliseconds
      {"metadata", std::move(metadata)},
  };
  return line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace ddprun::launcher
