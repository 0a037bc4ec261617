// ReplyQueue and KvState's shared values: a reply references a large stored value instead of
// copying it, so N readers cost one copy, and a value replaced while a reply sends it still
// arrives whole and as it was read. No sockets: the "kernel" here is a loop that takes a few
// bytes of the gathered buffers at a time.
#include "server/reply_queue.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "kv_state.h"
#include "protocol/wire.h"

using ddprun::rendezvous::KvState;
using ddprun::rendezvous::ReplyQueue;
using ddprun::rendezvous::ValueRef;

namespace {

// Takes up to `step` bytes of `queue`'s gathered buffers, as a socket's write would, and appends
// them to `wire`; returns how many.
std::size_t writeSome(ReplyQueue& queue, std::string& wire, std::size_t step) {
  std::vector<boost::asio::const_buffer> buffers;
  queue.gather(buffers);
  REQUIRE(buffers.size() <= ReplyQueue::kMaxBuffers);
  std::size_t taken = 0;
  for (const auto& buffer : buffers) {
    const std::size_t n = std::min(step - taken, buffer.size());
    wire.append(static_cast<const char*>(buffer.data()), n);
    taken += n;
    if (taken == step) break;
  }
  queue.consume(taken);
  return taken;
}

std::string blobOf(const std::string& bytes) {
  std::string out;
  ddprun::rendezvous::protocol::putBlob(out, bytes);
  return out;
}

}  // namespace

TEST_CASE("a reply sends small values as copies and large ones by reference, in order",
          "[reply_queue]") {
  KvState kv;
  const std::string large(3 * ReplyQueue::kShareMinBytes + 7, 'L');
  kv.set("small", "s");
  kv.set("large", large);
  ReplyQueue queue;
  queue.bytes() += "A";
  queue.appendBlob(kv.share("large"));
  queue.appendBlob(kv.share("small"));
  queue.appendBlob(kv.share("missing"));  // an empty blob
  queue.appendBlob(kv.share("large"));
  queue.bytes() += "Z";
  const std::string expected = "A" + blobOf(large) + blobOf("s") + blobOf("") + blobOf(large) + "Z";
  CHECK(queue.wireBytes() == expected.size());
  // It owns everything but the two large values' bytes.
  CHECK(queue.ownedBytes() == expected.size() - 2 * large.size());
  for (const std::size_t step :
       {std::size_t{1}, std::size_t{5}, std::size_t{1000}, expected.size()}) {
    ReplyQueue copy;
    copy.bytes() += "A";
    copy.appendBlob(kv.share("large"));
    copy.appendBlob(kv.share("small"));
    copy.appendBlob(kv.share("missing"));
    copy.appendBlob(kv.share("large"));
    copy.bytes() += "Z";
    std::string wire;
    for (int i = 0; i < 100000 && !copy.empty(); ++i) REQUIRE(writeSome(copy, wire, step) > 0);
    INFO("step " << step);
    CHECK(wire == expected);
    CHECK(copy.wireBytes() == 0);
  }
}

TEST_CASE("a value replaced while a reply referencing it is being written arrives whole and old",
          "[reply_queue]") {
  KvState kv;
  const std::string before(64 * 1024, 'o');
  const std::string after(80 * 1024, 'n');
  kv.set("world", before);
  ReplyQueue queue;
  queue.appendBlob(kv.share("world"));
  std::string wire;
  REQUIRE(writeSome(queue, wire, 1000) == 1000);  // part of it is on its way
  SECTION("overwritten") { kv.set("world", after); }
  SECTION("appended to") { kv.append("world", "more"); }
  SECTION("erased") { CHECK(kv.erase("world")); }
  SECTION("replaced by compare_set") { kv.compareSet("world", before, after); }
  // The map let go of the old buffer while the reply held it: the reply's memory now, not data.
  CHECK(kv.detachedBytes() == before.size());
  for (int i = 0; i < 1000 && !queue.empty(); ++i) writeSome(queue, wire, 4096);
  CHECK(wire == blobOf(before));
  // Written whole, the old value is freed and uncounted.
  CHECK(kv.detachedBytes() == 0);
}

TEST_CASE("N readers of one value add nothing to the data's count, and overwriting costs it once",
          "[reply_queue]") {
  KvState kv;
  const std::string value(100 * 1024, 'w');
  kv.set("world", value);
  const std::size_t stored = kv.storedBytes();
  std::vector<ReplyQueue> replies(1000);
  for (ReplyQueue& reply : replies) reply.appendBlob(kv.share("world"));
  CHECK(kv.storedBytes() == stored);
  CHECK(kv.detachedBytes() == 0);
  std::size_t owned = 0;
  for (const ReplyQueue& reply : replies) owned += reply.ownedBytes();
  CHECK(owned == 8 * replies.size());  // the lengths; the value is the stored one
  // Overwritten while all of them hold it: one copy leaves the data's count for the replies'.
  kv.set("world", "small");
  CHECK(kv.detachedBytes() == value.size());
  CHECK(kv.storedBytes() == stored - value.size() + 5);
  replies.resize(1);
  CHECK(kv.detachedBytes() == value.size());  // one reply still holds it
  replies.clear();
  CHECK(kv.detachedBytes() == 0);
}

TEST_CASE(
    "a counter changes in place while no reply holds it, and gets a new buffer when one "
    "does",
    "[reply_queue]") {
  KvState kv;
  kv.add("counter", 1);
  const ValueRef first = kv.share("counter");
  kv.add("counter", 1);  // a reply holds "1": it must keep reading "1"
  CHECK(first->bytes == "1");
  CHECK(*kv.find("counter") == "2");
  const ValueRef second = kv.share("counter");
  CHECK(second != first);
  CHECK(kv.detachedBytes() == 1);
}

TEST_CASE("compact keeps the unsent bytes and the references, in order", "[reply_queue]") {
  KvState kv;
  const std::string large(4 * ReplyQueue::kShareMinBytes, 'x');
  kv.set("large", large);
  ReplyQueue queue;
  queue.bytes() += std::string(10000, 'h');
  queue.appendBlob(kv.share("large"));
  queue.bytes() += "tail";
  std::string wire;
  writeSome(queue, wire, 9000);
  queue.compact(0);
  CHECK(queue.ownedBytes() == 1000 + 8 + 4);
  for (int i = 0; i < 100 && !queue.empty(); ++i) writeSome(queue, wire, 777);
  CHECK(wire == std::string(10000, 'h') + blobOf(large) + "tail");
}
