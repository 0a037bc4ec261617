// SlicedReply: a reply too large to build in one event-loop turn (LIST_KEYS over a million keys,
// a MULTI_GET of thousands of keys or many megabytes), produced a slice per turn so that the other
// connections are served in between. The session produces no other reply of its connection
// until this one is complete, so replies stay in request order.
//
// A slice is at most kSliceKeys entries and at most kSliceBytes, unless its first entry alone is
// larger (a MULTI_GET of an 8 MiB value). What a concurrent writer's changes do to the reply:
//   LIST_KEYS  nothing: the names are those of the moment the request was handled (KeyListing),
//              so the count the reply starts with always matches the names that follow;
//   MULTI_GET  each slice reads its values when it is produced, so a write landing between two
//              slices shows in the later keys only. A MULTI_GET that fits one slice (the usual
//              case) is read at once, as torch's servers read every MULTI_GET. A large value is
//              referenced, not copied (ReplyQueue::appendBlob): a write after its slice was
//              produced does not change what is sent.
//
// Lives on the server's event-loop thread, like the session that owns it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kv_state.h"
#include "server/reply_queue.h"

namespace ddprun::rendezvous {

class SlicedReply {
 public:
  // A few thousand keys or about a megabyte take well under a millisecond to produce: the most
  // one connection's large reply delays the others.
  static constexpr std::size_t kSliceKeys = 4096;
  static constexpr std::size_t kSliceBytes = 1024 * 1024;

  // The key names of a LIST_KEYS reply (the caller writes the count first: listing->size()).
  static std::unique_ptr<SlicedReply> listKeys(std::unique_ptr<KeyListing> listing);
  // The value blobs of a MULTI_GET reply, a missing key as an empty value.
  static std::unique_ptr<SlicedReply> multiGet(std::vector<std::string> keys);

  virtual ~SlicedReply() = default;
  // The bytes the next slice would own in the reply queue, or more (never less): what
  // backpressure decides on (a large value it references costs nothing: see Session's limits).
  virtual std::size_t nextSliceBytes(const KvState& kv) const = 0;
  // Appends the next slice to `out`; true when the reply is complete.
  virtual bool appendSlice(ReplyQueue& out, const KvState& kv) = 0;
};

}  // namespace ddprun::rendezvous
