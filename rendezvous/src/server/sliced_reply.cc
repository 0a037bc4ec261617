#include "server/sliced_reply.h"

#include <algorithm>

#include "protocol/wire.h"

namespace ddprun::rendezvous {

namespace {

class ListKeysReply final : public SlicedReply {
 public:
  explicit ListKeysReply(std::unique_ptr<KeyListing> listing) : listing_(std::move(listing)) {}

  std::size_t nextSliceBytes(const KvState&) const override {
    // Keys are far shorter than a slice, so no slice is larger than kSliceBytes.
    return std::min(listing_->remainingBlobBytes(), kSliceBytes);
  }

  bool appendSlice(ReplyQueue& queue, const KvState&) override {
    std::string& out = queue.bytes();
    std::size_t bytes = 0;
    for (std::size_t taken = 0; taken < kSliceKeys; ++taken) {
      const std::optional<std::size_t> size = listing_->nextSize();
      if (!size) return true;
      if (bytes > 0 && bytes + 8 + *size > kSliceBytes) return false;
      protocol::putBlob(out, *listing_->next());
      bytes += 8 + *size;
    }
    return !listing_->nextSize();
  }

 private:
  std::unique_ptr<KeyListing> listing_;
};

class MultiGetReply final : public SlicedReply {
 public:
  explicit MultiGetReply(std::vector<std::string> keys) : keys_(std::move(keys)) {}

  std::size_t nextSliceBytes(const KvState& kv) const override {
    std::size_t bytes = 0;
    std::size_t owned = 0;
    sliceEnd(kv, bytes, owned);
    return owned;
  }

  bool appendSlice(ReplyQueue& out, const KvState& kv) override {
    std::size_t bytes = 0;
    std::size_t owned = 0;
    const std::size_t end = sliceEnd(kv, bytes, owned);
    out.bytes().reserve(out.bytes().size() + owned);
    for (; next_ < end; ++next_) {
      // Like torch's libuv server (the 2.x default): a missing key reads as an empty value.
      out.appendBlob(kv.share(keys_[next_]));
    }
    return next_ == keys_.size();
  }

 private:
  // Where the next slice ends; its size on the wire in `bytes` (what a slice is cut at: a
  // slice's time is that of its bytes for the client too), what the queue will own in `owned`.
  std::size_t sliceEnd(const KvState& kv, std::size_t& bytes, std::size_t& owned) const {
    std::size_t end = next_;
    while (end < keys_.size() && end - next_ < kSliceKeys) {
      const std::string* value = kv.find(keys_[end]);
      const std::size_t size = value ? value->size() : 0;
      const std::size_t blob = 8 + size;
      if (end > next_ && bytes + blob > kSliceBytes) break;
      bytes += blob;
      owned += 8 + (size < ReplyQueue::kShareMinBytes ? size : 0);
      ++end;
    }
    return end;
  }

  std::vector<std::string> keys_;
  std::size_t next_ = 0;
};

}  // namespace

std::unique_ptr<SlicedReply> SlicedReply::listKeys(std::unique_ptr<KeyListing> listing) {
  return std::make_unique<ListKeysReply>(std::move(listing));
}

std::unique_ptr<SlicedReply> SlicedReply::multiGet(std::vector<std::string> keys) {
  return std::make_unique<MultiGetReply>(std::move(keys));
}

}  // namespace ddprun::rendezvous
