#include "ddprun/rendezvous/prefix_store.h"

#include <stdexcept>

namespace ddprun::rendezvous {

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {
  if (!base_) throw std::invalid_argument("PrefixStore: the wrapped store is null");
  Store::setTimeout(base_->timeout());
}

// c10d's rule: prefix + "/" + key.
std::string PrefixStore::full(std::string_view key) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + key.size());
  out.append(prefix_).append("/").append(key);
  return out;
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(full(key));
  return out;
}

void PrefixStore::set(std::string_view key, std::string_view value) {
  base_->set(full(key), value);
}
std::string PrefixStore::get(std::string_view key) { return base_->get(full(key)); }
std::optional<std::string> PrefixStore::tryGet(std::string_view key) {
  return base_->tryGet(full(key));
}
std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) {
  return base_->add(full(key), delta);
}
std::int64_t PrefixStore::takeTicket(std::string_view key) { return base_->takeTicket(full(key)); }
std::int64_t PrefixStore::ticketCount(std::string_view key) {
  return base_->ticketCount(full(key));
}
std::string PrefixStore::compareSet(std::string_view key, std::string_view expected,
                                    std::string_view desired) {
  return base_->compareSet(full(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  base_->wait(full(keys), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }
bool PrefixStore::deleteKey(std::string_view key) { return base_->deleteKey(full(key)); }
std::int64_t PrefixStore::numKeys() { return base_->numKeys(); }
std::vector<std::string> PrefixStore::multiGet(const std::vector<std::string>& keys) {
  return base_->multiGet(full(keys));
}
void PrefixStore::multiSet(const std::vector<std::string>& keys,
                           const std::vector<std::string>& values) {
  base_->multiSet(full(keys), values);
}
void PrefixStore::append(std::string_view key, std::string_view value) {
  base_->append(full(key), value);
}

std::vector<std::string> PrefixStore::listKeys() {
  const std::string head = prefix_ + "/";
  std::vector<std::string> out;
  for (std::string& key : base_->listKeys()) {
    if (key.starts_with(head)) out.push_back(key.substr(head.size()));
  }
  return out;
}

ListedKeys PrefixStore::listPrefix(std::string_view prefix, std::size_t maxKeys) {
  ListedKeys listed = base_->listPrefix(full(prefix), maxKeys);
  const std::size_t head = prefix_.size() + 1;  // every name starts with full(prefix)
  for (std::string& key : listed.keys) key.erase(0, head);
  return listed;
}

std::int64_t PrefixStore::deletePrefix(std::string_view prefix) {
  return base_->deletePrefix(full(prefix));
}

void PrefixStore::barrier(std::string_view key, std::int64_t worldSize, Duration timeout) {
  base_->barrier(full(key), worldSize, timeout);
}

void PrefixStore::setTimeout(Duration timeout) {
  Store::setTimeout(timeout);
  base_->setTimeout(timeout);
}

}  // namespace ddprun::rendezvous
