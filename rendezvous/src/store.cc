// Default implementations of the optional Store operations in terms of the core ones, for backends
// (and wire dialects) that have no native form of them.
#include "ddprun/rendezvous/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "ddprun/rendezvous/holding_store.h"

namespace ddprun::rendezvous {

std::optional<std::string> Store::tryGet(std::string_view key) {
  // Not atomic: a key deleted between the two blocks get() for up to timeout() (then it throws
  // StoreTimeoutError). Backends that can read in one step override this.
  if (!check({std::string(key)})) return std::nullopt;
  return get(key);
}

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

ListedKeys Store::listPrefix(std::string_view prefix, std::size_t maxKeys) {
  std::vector<std::string> all = listKeys();
  std::erase_if(all, [prefix](const std::string& key) { return !key.starts_with(prefix); });
  std::sort(all.begin(), all.end());
  ListedKeys listed;
  const std::size_t limit = std::min(maxKeys, kMaxListedKeys);
  std::size_t bytes = 0;
  for (std::string& key : all) {
    if (listed.keys.size() == limit ||
        (!listed.keys.empty() && bytes + key.size() > kMaxListedBytes)) {
      listed.more = true;
      break;
    }
    bytes += key.size();
    listed.keys.push_back(std::move(key));
  }
  return listed;
}

std::int64_t Store::deletePrefix(std::string_view prefix) {
  // A page at a time. Each page's keys are deleted before the next is asked for, so every page
  // but a raced one is new; the bound only stops a writer that refills the prefix as fast as it
  // is emptied (4096 pages: more keys than a store within its memory budget holds).
  constexpr int kMaxPages = 4096;
  std::int64_t deleted = 0;
  for (int page = 0; page < kMaxPages; ++page) {
    const ListedKeys listed = listPrefix(prefix, kMaxListedKeys);
    for (const std::string& key : listed.keys) {
      if (deleteKey(key)) ++deleted;
    }
    if (!listed.more || listed.keys.empty()) break;
  }
  return deleted;
}

std::vector<std::string> HoldingStore::waitForAnyMissing(const std::vector<std::string>& keys,
                                                         Duration timeout) {
  constexpr Duration kPoll(50);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::string> missing;
    if (!check(keys)) {  // one request in the usual case, every key there
      for (const std::string& key : keys) {
        if (!check({key})) missing.push_back(key);
      }
    }
    if (!missing.empty() || keys.empty()) return missing;
    // Every key there (or the missing one came back between the two checks): look again later.
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(kPoll, deadline - now));
  }
}

void Store::barrier(std::string_view key, std::int64_t worldSize, Duration timeout) {
  // Portable form (any c10d server): count arrivals, the last one opens the door.
  const std::string doneKey = std::string(key) + "/done";
  if (add(key, 1) >= worldSize) set(doneKey, "1");
  wait({doneKey}, timeout);
}

}  // namespace ddprun::rendezvous
