// ReplyQueue: one connection's reply bytes waiting for the socket, as the bytes the session wrote
// itself (codes, counts, lengths, small values) with stored values spliced in by reference.
//
// A large value (kShareMinBytes or more) is not copied into the reply: the queue holds the
// stored buffer (ValueRef) and the socket reads it from there (scatter/gather, one sendmsg for
// the whole queue). So N clients reading one value of V bytes at once cost the server V, not
// N x V: at 4,096 nodes, each reading the round's ~250 KB world, that is what kept a gigabyte
// of copies in flight. A value overwritten meanwhile is still sent whole, as it was when read.
//
// Lives on the server's event-loop thread, like the session that owns it.
#pragma once

#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kv_state.h"

namespace ddprun::rendezvous {

class ReplyQueue {
 public:
  // Values below this are copied: a copy of a few hundred bytes costs less than the reference,
  // the extra iovec and keeping the buffer alive.
  static constexpr std::size_t kShareMinBytes = 1024;
  // At most this many buffers per write (Asio hands a socket no more than 64 at once).
  static constexpr std::size_t kMaxBuffers = 64;

  // Appends owned bytes: the reference is valid until the next appendValue(), consume() or clear().
  std::string& bytes() { return owned_; }
  // Appends a value blob (u64 length, then the bytes): by reference when it is large.
  void appendBlob(const ValueRef& value);

  // Every byte still to be written.
  std::size_t wireBytes() const { return owned_.size() - ownedSent_ + sharedBytes_; }
  // Of those, the bytes this queue owns (not the shared values it references).
  std::size_t ownedBytes() const { return owned_.size() - ownedSent_; }
  bool empty() const { return wireBytes() == 0; }

  // The unsent bytes, in order, as at most kMaxBuffers buffers (replacing `out`'s contents).
  void gather(std::vector<boost::asio::const_buffer>& out) const;
  // Drops the first `bytes` unsent bytes (the kernel took them); true when a shared value was
  // released with them. Resets the queue once it is empty.
  bool consume(std::size_t bytes);
  // Moves the unsent owned bytes to a buffer of their size when the queue's buffer is far larger
  // (a peer that stops reading then holds what it did not read, not a large reply's capacity).
  void compact(std::size_t retainedCapacity);
  // Empties the queue, releasing its buffer when it grew past `retainedCapacity`.
  void clear(std::size_t retainedCapacity);

 private:
  struct Splice {
    std::size_t at;  // the offset in owned_ the value comes before
    ValueRef value;
  };

  std::string owned_;
  std::vector<Splice> splices_;
  std::size_t firstSplice_ = 0;  // the first splice not wholly sent
  std::size_t ownedSent_ = 0;    // of owned_, the bytes sent (never past splices_[firstSplice_].at)
  std::size_t valueSent_ = 0;    // of splices_[firstSplice_]'s value, the bytes sent
  std::size_t sharedBytes_ = 0;  // the spliced values' bytes not yet sent
};

}  // namespace ddprun::rendezvous
