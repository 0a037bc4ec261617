// PrefixStore: a Store whose keys live under "<prefix>/" of another store, like c10d's PrefixStore
// (same join rule, so PyTorch and ddprun agree on the full key). ddprun namespaces each job and
// each restart generation this way: PrefixStore(store, "ddprun/<run id>/<generation>").
//
// Thread safety: as the wrapped store. The wrapped store must outlive this one when given by
// reference; the shared_ptr constructor shares ownership.
#pragma once

#include <memory>
#include <string>

#include "ddprun/rendezvous/store.h"

namespace ddprun::rendezvous {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);

  const std::string& prefix() const { return prefix_; }
  Store& base() { return *base_; }

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  std::optional<std::string> tryGet(std::string_view key) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::int64_t takeTicket(std::string_view key) override;
  std::int64_t ticketCount(std::string_view key) override;
  std::string compareSet(std::string_view key, std::string_view expected,
                         std::string_view desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(std::string_view key) override;
  std::int64_t numKeys() override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::string>& values) override;
  void append(std::string_view key, std::string_view value) override;
  std::vector<std::string> listKeys() override;
  // Only this store's keys: the wrapped store lists and deletes under "<prefix>/" + `prefix`, so
  // "" means every key of this namespace and never one of another.
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override;
  std::int64_t deletePrefix(std::string_view prefix) override;
  void barrier(std::string_view key, std::int64_t worldSize, Duration timeout) override;
  // Also sets the wrapped store's timeout, which governs the calls forwarded to it.
  void setTimeout(Duration timeout) override;

 private:
  std::string full(std::string_view key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace ddprun::rendezvous
