// Reading a JSON record that another agent (or a ddprun of another version) wrote: each field is
// read whole or the record is refused with std::invalid_argument naming the field, never half
// read. One copy for every record the agents exchange as JSON (the snapshot, its incidents).
//
// Thread safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace ddprun::launcher {

// value[key] as T. `record` names what is read ("the snapshot") in the exception.
template <typename T>
T jsonField(const nlohmann::json& value, const char* key, std::string_view record) {
  const auto it = value.find(key);
  if (it == value.end()) throw std::invalid_argument(fmt::format("{} has no '{}'", record, key));
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(fmt::format("{}'s '{}' has the wrong type", record, key));
  }
}

// value[key] as T, nothing when it is missing or null.
template <typename T>
std::optional<T> optionalJsonField(const nlohmann::json& value, const char* key,
                                   std::string_view record) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return std::nullopt;
  return jsonField<T>(value, key, record);
}

}  // namespace ddprun::launcher
