// Default implementations of the optional Store operations in terms of the core ones, for backends
// (and wire dialects) that have no native form of them.
#include "ddprun/rendezvous/store.h"

#include <fmt/format.h>

namespace ddprun::rendezvous {

std::vector<std::string> Store::multiGet(const std::vector<std::string>& keys) {
  wait(keys, timeout());
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(get(key));
  return values;
}

void Store::multiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw StoreError(fmt::format("multiSet: {} keys but {} values", keys.size(), values.size()));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

void Store::append(std::string_view key, std::string_view value) {
  // A read-modify-write through compareSet. compareSet answers `desired` both when it swapped and
  // when the key already held `desired`, so the value must be read first, not guessed: guessing
  // "" and appending "x" to a key holding "x" would look done. This compareSet only reads (its
  // expected value is one nobody stores; were it stored, the swap would rewrite it unchanged) and
  // answers the value, or kProbe itself for a missing key.
  static constexpr std::string_view kProbe = "<ddprun append probe 7f3c>";
  std::string current = compareSet(key, kProbe, kProbe);
  if (current == kProbe) current.clear();
  for (;;) {
    std::string desired = current + std::string(value);
    std::string seen = compareSet(key, current, desired);
    // Exact, unless another client wrote this very `desired` between the read and the swap.
    if (seen == desired) return;
    // The key changed meanwhile; `expected` echoed back means it is missing now.
    current = seen == current ? std::string() : std::move(seen);
  }
}

std::vector<std::string> Store::listKeys() {
  throw StoreUnsupportedError("listKeys is not supported by this store");
}

void Store::barrier(std::string_view key, std::int64_t worldSize, Duration timeout) {
  // Portable form (any c10d server): count arrivals, the last one opens the door.
  const std::string doneKey = std::string(key) + "/done";
  if (add(key, 1) >= worldSize) set(doneKey, "1");
  wait({doneKey}, timeout);
}

}  // namespace ddprun::rendezvous
