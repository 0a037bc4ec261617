// The incremental request decoder: same requests whatever the segmentation, dialect chosen from
// the first bytes, limits enforced before allocation, garbage rejected.
#include "protocol/request_decoder.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "raw_client.h"

using ddprun::rendezvous::ProtocolLimits;
using ddprun::rendezvous::WireDialect;
using ddprun::rendezvous::protocol::Op;
using ddprun::rendezvous::protocol::Request;
namespace protocol = ddprun::rendezvous::protocol;
using ddprun::rendezvous::protocol::RequestDecoder;
using ddprun::test::hex;

namespace {

struct Decoded {
  std::vector<Request> requests;
  bool error = false;
  std::string errorText;
  std::optional<WireDialect> dialect;
};

// Feeds `stream` to a fresh decoder in the pieces given by `cuts` (sizes; the rest at the end).
Decoded decodeInPieces(const std::string& stream, const std::vector<std::size_t>& cuts,
                       ProtocolLimits limits = {}) {
  RequestDecoder decoder(limits);
  Decoded out;
  std::size_t offset = 0;
  auto feed = [&](std::size_t size) {
    const auto* data = reinterpret_cast<const unsigned char*>(stream.data()) + offset;
    const auto* end = data + size;
    offset += size;
    while (data < end && !out.error) {
      const auto status = decoder.decode(data, end);
      if (status == RequestDecoder::Status::kRequest) out.requests.push_back(decoder.request());
      if (status == RequestDecoder::Status::kError) {
        out.error = true;
        out.errorText = decoder.error();
      }
    }
  };
  for (std::size_t cut : cuts) {
    if (out.error || offset >= stream.size()) break;
    feed(std::min(cut, stream.size() - offset));
  }
  if (!out.error && offset < stream.size()) feed(stream.size() - offset);
  out.dialect = decoder.dialect();
  return out;
}

Decoded decodeWhole(const std::string& stream) { return decodeInPieces(stream, {}); }

Decoded decodeByteByByte(const std::string& stream) {
  return decodeInPieces(stream, std::vector<std::size_t>(stream.size(), 1));
}

bool sameRequests(const std::vector<Request>& a, const std::vector<Request>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].op != b[i].op || a[i].keys != b[i].keys || a[i].values != b[i].values ||
        a[i].integer != b[i].integer || a[i].word != b[i].word) {
      return false;
    }
  }
  return true;
}

// A 2.x session exercising every op's layout, as real clients send it.
std::string torch2Session() {
  return hex(
      "00 cef7853c"                                                              // VALIDATE
      "0d c6070000"                                                              // PING
      "01 0300000000000000 2f6b31 0200000000000000 7631"                         // SET /k1 v1
      "02 0300000000000000 2f6373 0000000000000000 0300000000000000 6e6577"      // COMPARE_SET
      "03 0300000000000000 2f6b31"                                               // GET
      "04 0400000000000000 2f636e74 fdffffffffffffff"                            // ADD -3
      "05 0200000000000000 0300000000000000 2f6b31 0500000000000000 2f6e6f7065"  // CHECK
      "06 0100000000000000 0300000000000000 2f6b31"                              // WAIT
      "07"                                                                       // GETNUMKEYS
      "08 0300000000000000 2f6b31"                                               // DELETE_KEY
      "09 0300000000000000 2f6170 0200000000000000 6162"                         // APPEND
      "0a 0200000000000000 0300000000000000 2f6d31 0300000000000000 2f6d32"      // MULTI_GET
      "0b 0200000000000000 0300000000000000 2f6d31 0100000000000000 31"
      "   0300000000000000 2f6d32 0200000000000000 3232"  // MULTI_SET
      "0c"                                                // CANCEL_WAIT
      "0e 0100000000000000 71 0100000000000000 78"        // QUEUE_PUSH
      "0f 0100000000000000 71"                            // QUEUE_POP
      "10 0100000000000000 71"                            // QUEUE_LEN
      "11"                                                // LIST_KEYS
      "12 0100000000000000 62 0400000000000000");         // BARRIER b 4
}

// A 1.13 session: no handshake, the 1.13 op table.
std::string torch113Session() {
  return hex(
      "03 0500000000000000 696e69742f 0100000000000000"                       // ADD init/ 1
      "00 0300000000000000 2f6b31 0200000000000000 7631"                      // SET /k1 v1
      "05 0100000000000000 0300000000000000 2f6b31"                           // WAIT
      "02 0300000000000000 2f6b31"                                            // GET
      "01 0400000000000000 2f637332 0100000000000000 78 0100000000000000 79"  // COMPARE_SET
      "04 0000000000000000"                                                   // CHECK []
      "06"                                                                    // GETNUMKEYS
      "07 0200000000000000 2f77"                                              // WATCH_KEY
      "08 0500000000000000 2f6e6f7065");                                      // DELETE_KEY
}

}  // namespace

TEST_CASE("a torch 2.x session decodes into every op with its fields", "[decoder]") {
  const Decoded d = decodeWhole(torch2Session());
  REQUIRE_FALSE(d.error);
  REQUIRE(d.dialect == WireDialect::kTorch2);
  const std::vector<Op> ops = {Op::kValidate, Op::kPing,       Op::kSet,       Op::kCompareSet,
                               Op::kGet,      Op::kAdd,        Op::kCheck,     Op::kWait,
                               Op::kNumKeys,  Op::kDeleteKey,  Op::kAppend,    Op::kMultiGet,
                               Op::kMultiSet, Op::kCancelWait, Op::kQueuePush, Op::kQueuePop,
                               Op::kQueueLen, Op::kListKeys,   Op::kBarrier};
  REQUIRE(d.requests.size() == ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) CHECK(d.requests[i].op == ops[i]);
  CHECK(d.requests[0].word == 0x3C85F7CE);
  CHECK(d.requests[1].word == 0x07c6);
  CHECK(d.requests[2].keys == std::vector<std::string>{"/k1"});
  CHECK(d.requests[2].values == std::vector<std::string>{"v1"});
  CHECK(d.requests[3].values == std::vector<std::string>{"", "new"});
  CHECK(d.requests[5].integer == -3);
  CHECK(d.requests[6].keys == std::vector<std::string>{"/k1", "/nope"});
  CHECK(d.requests[12].keys == std::vector<std::string>{"/m1", "/m2"});
  CHECK(d.requests[12].values == std::vector<std::string>{"1", "22"});
  CHECK(d.requests[18].keys == std::vector<std::string>{"b"});
  CHECK(d.requests[18].integer == 4);
}

TEST_CASE("a torch 1.13 session is recognised without a handshake", "[decoder]") {
  const Decoded d = decodeWhole(torch113Session());
  REQUIRE_FALSE(d.error);
  REQUIRE(d.dialect == WireDialect::kTorch113);
  const std::vector<Op> ops = {Op::kAdd,     Op::kSet,        Op::kWait,
                               Op::kGet,     Op::kCompareSet, Op::kCheck,
                               Op::kNumKeys, Op::kWatchKey,   Op::kDeleteKey};
  REQUIRE(d.requests.size() == ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) CHECK(d.requests[i].op == ops[i]);
  CHECK(d.requests[0].keys == std::vector<std::string>{"init/"});
  CHECK(d.requests[4].values == std::vector<std::string>{"x", "y"});
  CHECK(d.requests[5].keys.empty());
}

TEST_CASE("a 1.13 connection that starts with SET is told apart from VALIDATE", "[decoder]") {
  // 00 + key length 3: the 4 bytes after the op are 03 00 00 00, not the magic.
  const Decoded d = decodeByteByByte(hex("00 0300000000000000 2f6b31 0200000000000000 7631"));
  REQUIRE_FALSE(d.error);
  REQUIRE(d.dialect == WireDialect::kTorch113);
  REQUIRE(d.requests.size() == 1);
  CHECK(d.requests[0].op == Op::kSet);
  CHECK(d.requests[0].keys == std::vector<std::string>{"/k1"});
  CHECK(d.requests[0].values == std::vector<std::string>{"v1"});
}

TEST_CASE("byte-by-byte and random splits decode exactly like whole buffers", "[decoder]") {
  for (const std::string& session : {torch2Session(), torch113Session()}) {
    const Decoded whole = decodeWhole(session);
    REQUIRE_FALSE(whole.error);
    const Decoded bytewise = decodeByteByByte(session);
    REQUIRE_FALSE(bytewise.error);
    CHECK(sameRequests(whole.requests, bytewise.requests));

    std::mt19937 random(1234);
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<std::size_t> cuts;
      std::size_t total = 0;
      while (total < session.size()) {
        cuts.push_back(std::uniform_int_distribution<std::size_t>(1, 17)(random));
        total += cuts.back();
      }
      const Decoded split = decodeInPieces(session, cuts);
      REQUIRE_FALSE(split.error);
      REQUIRE(sameRequests(whole.requests, split.requests));
    }
  }
}

TEST_CASE("lengths and counts over the limits are rejected before their bytes arrive",
          "[decoder][limits]") {
  ProtocolLimits limits;
  limits.maxKeyBytes = 16;
  limits.maxValueBytes = 32;
  limits.maxKeysPerRequest = 4;
  SECTION("key one byte too long") {
    const Decoded d = decodeInPieces(hex("00cef7853c 01 1100000000000000"), {}, limits);
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("SET key length 17 exceeds the 16-byte limit"));
  }
  SECTION("value one byte too long") {
    const Decoded d =
        decodeInPieces(hex("00cef7853c 01 0100000000000000 6b 2100000000000000"), {}, limits);
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("value length 33"));
  }
  SECTION("a value length of 2^64-1") {
    const Decoded d =
        decodeInPieces(hex("00cef7853c 09 0100000000000000 6b ffffffffffffffff"), {}, limits);
    CHECK(d.error);
  }
  SECTION("too many keys in one WAIT") {
    const Decoded d = decodeInPieces(hex("00cef7853c 06 0500000000000000"), {}, limits);
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("WAIT names 5 keys, over the limit of 4"));
  }
  SECTION("a MULTI_SET whose values together pass the request limit, while they arrive") {
    limits.maxRequestBytes = 64;  // values of 32 and keys of 1: the third pair passes 64
    std::string stream = hex("00cef7853c 0b 0400000000000000");
    for (char name : {'a', 'b', 'c'}) {
      stream += hex("0100000000000000") + std::string(1, name) + hex("2000000000000000") +
                std::string(32, 'v');
    }
    // Byte by byte: refused at the length that passes the limit, not after the bytes.
    const Decoded d = decodeInPieces(stream, std::vector<std::size_t>(stream.size(), 1), limits);
    CHECK(d.error);
    CHECK_THAT(d.errorText,
               Catch::Contains("MULTI_SET carries more than 64 bytes of keys and values"));
    CHECK(decodeInPieces(stream, {}, limits).error);
    // One value and its key always fit, whatever the request limit says.
    limits.maxRequestBytes = 1;
    CHECK_FALSE(decodeInPieces(hex("00cef7853c 01 1000000000000000") + std::string(16, 'k') +
                                   hex("2000000000000000") + std::string(32, 'v'),
                               {}, limits)
                    .error);
  }
  SECTION("exactly at the limits is fine") {
    std::string stream = hex("00cef7853c 01 1000000000000000") + std::string(16, 'k') +
                         hex("2000000000000000") + std::string(32, 'v');
    const Decoded d = decodeInPieces(stream, {}, limits);
    CHECK_FALSE(d.error);
    CHECK(d.requests.size() == 2);
  }
}

TEST_CASE("garbage, unknown ops and a wrong magic are errors", "[decoder]") {
  SECTION("unknown 1.13 op") {
    const Decoded d = decodeWhole(hex("63"));
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("unknown op 0x63 on a torch-1.13 connection"));
  }
  SECTION("unknown 2.x op after the handshake") {
    const Decoded d = decodeWhole(hex("00cef7853c 40"));
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("unknown op 0x40 on a torch-2.x connection"));
  }
  SECTION("a wrong magic reads as a 1.13 SET with an absurd key length") {
    const Decoded d = decodeWhole(hex("00 11223344 0d000000"));
    CHECK(d.error);
    CHECK_THAT(d.errorText, Catch::Contains("neither a torch 2.x VALIDATE"));
  }
  SECTION("an HTTP request (a port scanner)") {
    const Decoded d = decodeWhole("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(d.error);
  }
}

TEST_CASE("the decoder reports when it is in the middle of a request", "[decoder]") {
  RequestDecoder decoder(ProtocolLimits{});
  const std::string stream = hex("03 0500000000000000 696e69742f 0100000000000000");
  const auto* data = reinterpret_cast<const unsigned char*>(stream.data());
  CHECK_FALSE(decoder.midRequest());
  const auto* cursor = data;
  CHECK(decoder.decode(cursor, data + 5) == RequestDecoder::Status::kNeedMore);
  CHECK(decoder.midRequest());
  CHECK(decoder.decode(cursor, data + stream.size()) == RequestDecoder::Status::kRequest);
  CHECK_FALSE(decoder.midRequest());
}

TEST_CASE("strings keep their storage across requests with and without values", "[decoder]") {
  // The server's steady loop (SET, WAIT, COMPARE_SET, ADD): a request without values in between
  // must not cost the next one its strings' allocations.
  RequestDecoder decoder(ProtocolLimits{});
  const std::string longValue(100, 'v');
  std::string set;
  protocol::putU8(set, 0);  // 1.13 SET
  protocol::putBlob(set, "/k");
  protocol::putBlob(set, longValue);
  std::string add;
  protocol::putU8(add, 3);  // 1.13 ADD
  protocol::putBlob(add, "/counter");
  protocol::putI64(add, 1);
  auto decodeOne = [&](const std::string& bytes) -> const Request& {
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    REQUIRE(decoder.decode(data, data + bytes.size()) == RequestDecoder::Status::kRequest);
    return decoder.request();
  };
  const char* storage = decodeOne(set).values.at(0).data();
  CHECK(decodeOne(add).values.empty());
  // Takes the block a freed string would have left, so that a fresh allocation lands elsewhere.
  const std::string sameSize(longValue.size(), 'x');
  const Request& again = decodeOne(set);
  REQUIRE(again.values == std::vector<std::string>{longValue});
  CHECK(again.values[0].data() == storage);
  CHECK(again.keys == std::vector<std::string>{"/k"});
}
