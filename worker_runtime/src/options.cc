// RuntimeOptions::fromEnvironment: the worker environment ddprun (and torchrun) sets.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "ddprun/common/worker_env_names.h"
#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime {
namespace {

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

[[noreturn]] void invalid(const std::string& message) {
  throw RuntimeError(RuntimeError::Kind::kInvalidArgument, message);
}

int integer(const char* name, const std::string& text, int minimum) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < minimum) {
    invalid(std::string(name) + "='" + text + "' is not an integer >= " + std::to_string(minimum) +
            ": set it to one (ddprun and torchrun set it for every worker)");
  }
  return value;
}

int required(const char* name, int minimum) {
  const auto text = variable(name);
  if (!text) {
    invalid(std::string(name) +
            " is not set: start the program with ddprun (or set RANK, WORLD_SIZE, MASTER_ADDR and "
            "MASTER_PORT yourself)");
  }
  return integer(name, *text, minimum);
}

}  // namespace

RuntimeOptions RuntimeOptions::fromEnvironment() {
  RuntimeOptions options;
  options.rank = required(common::kEnvRank, 0);
  options.worldSize = required(common::kEnvWorldSize, 1);
  options.masterPort = required(common::kEnvMasterPort, 1);
  if (options.rank >= options.worldSize) {
    invalid("RANK=" + std::to_string(options.rank) + " is not below WORLD_SIZE=" +
            std::to_string(options.worldSize) + ": every rank must be in [0, WORLD_SIZE)");
  }
  if (const auto text = variable(common::kEnvLocalRank)) {
    options.localRank = integer(common::kEnvLocalRank, *text, 0);
  }
  if (const auto text = variable(common::kEnvMasterAddr); text && !text->empty()) {
    options.masterAddr = *text;
  }
  if (const auto text = variable(common::kEnvTorchelasticRunId); text && !text->empty()) {
    options.runId = *text;
  }
  // DDPRUN_GENERATION changes on every re-formed round (restarts and membership changes alike);
  // torchrun sets only the restart count.
  if (const auto text = variable(common::kEnvDdprunGeneration)) {
    options.generation = integer(common::kEnvDdprunGeneration, *text, 0);
  } else if (const auto count = variable(common::kEnvTorchelasticRestartCount)) {
    options.generation = integer(common::kEnvTorchelasticRestartCount, *count, 0);
  }
  // As torch's env:// rendezvous: without an agent store, rank 0 hosts the store.
  options.hostStore =
      variable(common::kEnvTorchelasticUseAgentStore).value_or("") != common::kAgentStoreEnabled;
  if (const auto text = variable("DDPRUN_BACKEND")) options.backend = parseBackend(*text);
  if (const auto text = variable("DDPRUN_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (text->empty() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
      invalid("DDPRUN_TIMEOUT='" + *text +
              "' is not a positive number of seconds: e.g. DDPRUN_TIMEOUT=60");
    }
    options.timeout =
        std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
  }
  if (const auto text = variable("DDPRUN_GLOO_ADDR")) options.glooAddress = *text;
  // torch accepts a comma-separated list (one Gloo device per interface); one device is used here.
  if (const auto text = variable("GLOO_SOCKET_IFNAME")) {
    options.glooInterface = text->substr(0, text->find(','));
  }
  if (const auto text = variable("DDPRUN_DEVICE"))
    options.device = integer("DDPRUN_DEVICE", *text, 0);
  return options;
}

}  // namespace ddprun::runtime
