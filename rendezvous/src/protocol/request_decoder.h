// An incremental decoder for TCPStore requests, fed from a byte stream.
//
// Requests arrive split and merged arbitrarily (the 1.13 client sends the op byte in its own
// send(); a client may pipeline several requests in one write), so the decoder is a resumable state
// machine: it can be fed one byte at a time or a megabyte at a time and produces the same requests.
// It also decides the connection's dialect from the first bytes:
//
//   00 ce f7 85 3c          -> torch 2.x (VALIDATE with the magic)
//   00 <any other 4 bytes>  -> torch 1.13 SET (the 4 bytes start its 8-byte key length)
//   01..08                  -> torch 1.13, that op
//   anything else           -> error
//
// Every length and count is checked against ProtocolLimits as soon as its 8 bytes are in, and
// storage grows only with the bytes that actually arrive, so a peer that announces 8 MiB and sends
// 10 bytes costs 10 bytes.
//
// Not thread-safe; one decoder per connection.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/limits.h"
#include "protocol/wire.h"

namespace ddprun::rendezvous::protocol {

// One decoded request. Which fields an op fills:
//   keys      every key the op names, in wire order (one for single-key ops);
//             HOLD: {key, notify key}
//   values    SET/APPEND/QUEUE_PUSH: {value}; COMPARE_SET: {expected, desired};
//             MULTI_SET: one per key; HOLD: {value, notify value}
//   integer   ADD delta, BARRIER world size
//   word      VALIDATE magic, PING nonce, HOLD time-to-live in milliseconds
struct Request {
  Op op = Op::kNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t integer = 0;
  std::uint32_t word = 0;

  void clear();
};

class RequestDecoder {
 public:
  enum class Status {
    kNeedMore,  // every byte was consumed; the current request is not complete yet
    kRequest,   // request() is complete; bytes after it were left unconsumed
    kError,     // the stream is not a valid request sequence; error() says why
  };

  // `dialect` fixes the dialect up front; without it the first bytes decide.
  explicit RequestDecoder(ProtocolLimits limits, std::optional<WireDialect> dialect = std::nullopt);

  // Consumes bytes from [data, end), advancing `data`, up to the end of at most one request.
  // REQUIRES: the previous call did not return kError.
  Status decode(const unsigned char*& data, const unsigned char* end);

  const Request& request() const { return request_; }
  Request& request() { return request_; }
  // The dialect, once the first bytes have decided it.
  std::optional<WireDialect> dialect() const { return dialect_; }
  // True while part of a request has been consumed but not all of it.
  bool midRequest() const { return stage_ != Stage::kOpByte; }
  const std::string& error() const { return error_; }

 private:
  enum class Field : std::uint8_t { kWord, kInteger, kCount, kKey, kValue };
  enum class Stage : std::uint8_t {
    kOpByte,      // at a request boundary
    kSniffMagic,  // first byte was 0: are the next 4 bytes the 2.x magic?
    kFixed,       // reading a 4- or 8-byte field into scratch_
    kBlobBytes,   // copying a blob's bytes
  };
  struct Layout {
    Field head[5];
    std::uint8_t headSize;
    Field item[2];  // repeated `count` times after a kCount head field
    std::uint8_t itemSize;
  };

  static const Layout& layoutOf(Op op);
  // The common case in one pass: a whole, well-formed request already in [data, end). Returns
  // false (consuming nothing) when it is incomplete or needs a closer look; the state machine
  // then takes over from the op byte.
  bool decodeWhole(const unsigned char*& data, const unsigned char* end);
  Status startOp(std::uint8_t code);
  Status beginField();
  Status finishFixedField();
  Status nextField();
  Status fail(std::string message);
  // ProtocolLimits::maxRequestBytes, never below what one value and its key need.
  std::size_t maxRequestBytes() const {
    return std::max(limits_.maxRequestBytes, limits_.maxValueBytes + limits_.maxKeyBytes);
  }
  Field currentField() const;
  // Gives `list` exactly `count` strings, taking them from and leaving them to spare_.
  void fitList(std::vector<std::string>& list, std::size_t count);

  ProtocolLimits limits_;
  std::optional<WireDialect> dialect_;
  Request request_;
  Stage stage_ = Stage::kOpByte;
  const Layout* layout_ = nullptr;
  std::uint8_t headIndex_ = 0;
  std::uint8_t itemIndex_ = 0;
  bool inItems_ = false;
  bool sniffedSet_ = false;  // the first frame was taken as a 1.13 SET after the magic check
  std::uint64_t itemsLeft_ = 0;
  std::uint64_t blobLeft_ = 0;
  std::uint64_t requestBytes_ = 0;  // key and value bytes announced by the current request
  std::string* blob_ = nullptr;
  std::vector<std::string> spare_;  // strings (with their storage) no request holds now
  unsigned char scratch_[8] = {};
  std::uint8_t scratchLen_ = 0;
  std::uint8_t scratchNeed_ = 0;
  std::string error_;
};

}  // namespace ddprun::rendezvous::protocol
