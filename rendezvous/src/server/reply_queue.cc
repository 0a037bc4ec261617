#include "server/reply_queue.h"

#include <algorithm>
#include <utility>

#include "protocol/wire.h"

namespace ddprun::rendezvous {

void ReplyQueue::appendBlob(const ValueRef& value) {
  const std::string_view bytes = value ? std::string_view(value->bytes) : std::string_view();
  if (bytes.size() < kShareMinBytes) {
    protocol::putBlob(owned_, bytes);
    return;
  }
  protocol::putU64(owned_, bytes.size());
  splices_.push_back({owned_.size(), value});
  sharedBytes_ += bytes.size();
}

void ReplyQueue::gather(std::vector<boost::asio::const_buffer>& out) const {
  out.clear();
  std::size_t from = ownedSent_;
  std::size_t valueFrom = valueSent_;
  for (std::size_t i = firstSplice_; i < splices_.size() && out.size() < kMaxBuffers; ++i) {
    const Splice& splice = splices_[i];
    if (splice.at > from) out.emplace_back(owned_.data() + from, splice.at - from);
    if (out.size() == kMaxBuffers) return;
    const std::string& value = splice.value->bytes;
    if (value.size() > valueFrom)
      out.emplace_back(value.data() + valueFrom, value.size() - valueFrom);
    from = splice.at;
    valueFrom = 0;
  }
  if (out.size() < kMaxBuffers && owned_.size() > from) {
    out.emplace_back(owned_.data() + from, owned_.size() - from);
  }
}

bool ReplyQueue::consume(std::size_t bytes) {
  bool released = false;
  while (bytes > 0 && firstSplice_ < splices_.size()) {
    Splice& splice = splices_[firstSplice_];
    const std::size_t ownedTake = std::min(bytes, splice.at - ownedSent_);
    ownedSent_ += ownedTake;
    bytes -= ownedTake;
    const std::size_t valueTake = std::min(bytes, splice.value->bytes.size() - valueSent_);
    valueSent_ += valueTake;
    sharedBytes_ -= valueTake;
    bytes -= valueTake;
    if (ownedSent_ < splice.at || valueSent_ < splice.value->bytes.size()) break;
    splice.value.reset();
    released = true;
    ++firstSplice_;
    valueSent_ = 0;
  }
  ownedSent_ += std::min(bytes, owned_.size() - ownedSent_);
  if (empty()) {
    // Everything is written: start again from the front, keeping the buffer for the next replies.
    owned_.clear();
    splices_.clear();
    firstSplice_ = 0;
    ownedSent_ = 0;
    valueSent_ = 0;
  }
  return released;
}

void ReplyQueue::compact(std::size_t retainedCapacity) {
  if (owned_.capacity() <= retainedCapacity || ownedSent_ == 0) return;
  std::string rest(owned_, ownedSent_);
  owned_.swap(rest);
  for (std::size_t i = firstSplice_; i < splices_.size(); ++i) splices_[i].at -= ownedSent_;
  ownedSent_ = 0;
  splices_.erase(splices_.begin(), splices_.begin() + static_cast<std::ptrdiff_t>(firstSplice_));
  firstSplice_ = 0;
}

void ReplyQueue::clear(std::size_t retainedCapacity) {
  if (owned_.capacity() > retainedCapacity) {
    std::string().swap(owned_);
  } else {
    owned_.clear();
  }
  if (splices_.capacity() > kMaxBuffers) {
    std::vector<Splice>().swap(splices_);
  } else {
    splices_.clear();
  }
  firstSplice_ = 0;
  ownedSent_ = 0;
  valueSent_ = 0;
  sharedBytes_ = 0;
}

}  // namespace ddprun::rendezvous
