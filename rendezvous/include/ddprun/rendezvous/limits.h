// Size limits on what one request may carry. They are checked as soon as a length or count field
// has arrived, before anything is allocated for it, so a bogus 9-byte frame cannot make a peer
// reserve gigabytes. The defaults are those of torch's libuv store server.
#pragma once

#include <cstddef>

namespace ddprun::rendezvous {

struct ProtocolLimits {
  std::size_t maxKeyBytes = 8 * 1024;           // one key
  std::size_t maxValueBytes = 8 * 1024 * 1024;  // one value (SET, APPEND, COMPARE_SET, ...)
  std::size_t maxKeysPerRequest = 128 * 1024;   // CHECK, WAIT, MULTI_GET, MULTI_SET
  // The keys and values of one request together: what a connection can make the server buffer
  // before the request is complete (without it, a MULTI_SET could announce 128Ki values of
  // 8 MiB, a terabyte, and send them). At least maxValueBytes + maxKeyBytes is allowed always.
  std::size_t maxRequestBytes = 64 * 1024 * 1024;
};

}  // namespace ddprun::rendezvous
