// The c10d TCPStore wire vocabulary shared by ddprun's server and client: the two dialects' op
// tables, reply codes, the validation magic, and little-endian field encoding.
//
// docs/protocol.md is the readable specification; this file is its single source of truth in code.
// Neither torch dialect has a length header, a request id or a version field: a reader must know
// each op's layout, which is why every op is mapped to one dialect-neutral Op with one Layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/common/text.h"
#include "ddprun/rendezvous/limits.h"
#include "ddprun/rendezvous/wire_dialect.h"

namespace ddprun::rendezvous::protocol {

// What a request asks for, whatever the dialect's numbering.
enum class Op : std::uint8_t {
  kValidate,    // 2.x only: uint32 magic, no reply
  kSet,         // key, value; no reply
  kCompareSet,  // key, expected, desired; reply value blob
  kGet,         // key; reply value blob
  kAdd,         // key, int64 delta; reply int64
  kCheck,       // uint64 n, n keys; reply 1 byte (READY/NOT_READY)
  kWait,        // uint64 n, n keys; reply STOP_WAITING, now or when the last missing key appears
  kNumKeys,     // nothing; reply int64
  kWatchKey,    // 1.13 only: key; reply KEY_CALLBACK_REGISTERED, then pushed events
  kDeleteKey,   // key; reply int64 0/1
  kAppend,      // 2.x: key, bytes; no reply
  kMultiGet,    // 2.x: uint64 n, n keys; reply n value blobs
  kMultiSet,    // 2.x: uint64 n, n (key, value) pairs; no reply
  kCancelWait,  // 2.x: nothing; reply WAIT_CANCELED
  kPing,        // 2.x: uint32 nonce; reply the nonce
  kQueuePush,   // 2.x: key, value; no reply
  kQueuePop,    // 2.x: key; reply int64 length before the pop, then a value blob if it was > 0
  kQueueLen,    // 2.x: key; reply int64
  kListKeys,    // 2.x: nothing; reply int64 n, n key blobs
  kBarrier,     // 2.x: key, int64 world size; reply STOP_WAITING once the count reaches it
  // ddprun extensions (2.x dialect, ddprun's server only; torch's clients never send them):
  kHold,        // key, value, uint32 ttl ms, notify key, notify value; reply the key's value blob
  kRelease,     // key; reply int64 1 if this connection held it, else 0
  kListPrefix,  // prefix, int64 max keys; reply int64 n, n key blobs, uint8 more (1: others match)
  kDeletePrefix,  // prefix; reply int64 deleted, uint8 more (1: keys under it remain)
};
// How many ops there are: an array indexed by Op has this many entries.
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::kDeletePrefix) + 1;

std::string_view opName(Op op);

// torch 1.13's QueryType numbering.
namespace torch113 {
enum Code : std::uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kNumKeys = 6,
  kWatchKey = 7,
  kDeleteKey = 8,
};
}  // namespace torch113

// torch 2.x's QueryType numbering since VALIDATE became op 0; append-only since then.
namespace torch2 {
enum Code : std::uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
  kBarrier = 18,
};
}  // namespace torch2

// ddprun's own ops, on 2.x connections. Far above torch's append-only numbering (18 today) so a
// future torch op cannot collide with them.
namespace ddprun_ext {
enum Code : std::uint8_t {
  kHold = 0xD0,
  kRelease = 0xD1,
  kListPrefix = 0xD2,
  kDeletePrefix = 0xD3
};
}  // namespace ddprun_ext

// The op a wire code means in `dialect`, or nothing for a code the dialect does not have.
std::optional<Op> opFromWire(WireDialect dialect, std::uint8_t code);
// The wire code of `op` in `dialect`, or nothing when the dialect lacks the op.
std::optional<std::uint8_t> wireCode(WireDialect dialect, Op op);

// The first bytes a 2.x client sends: op 0 followed by this magic (little-endian).
inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

// One-byte replies.
inline constexpr std::uint8_t kCheckReady = 0;
inline constexpr std::uint8_t kCheckNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0;
inline constexpr std::uint8_t kWaitCanceled = 1;
inline constexpr std::uint8_t kKeyCallbackRegistered = 3;

// torch 1.13 WATCH_KEY events, pushed as: u8 event, key blob, old-value blob, new-value blob.
enum class WatchEvent : std::uint8_t { kUpdated = 0, kCreated = 1, kDeleted = 2 };

// Little-endian field encoding, appended to `out`. The torch peers copy native integers raw;
// every platform they run on is little-endian, and ddprun spells that out instead of assuming it.
void putU8(std::string& out, std::uint8_t v);
void putU32(std::string& out, std::uint32_t v);
void putU64(std::string& out, std::uint64_t v);
inline void putI64(std::string& out, std::int64_t v) { putU64(out, static_cast<std::uint64_t>(v)); }
// A blob: uint64 length, then the bytes.
void putBlob(std::string& out, std::string_view bytes);

std::uint32_t getU32(const unsigned char* p);
std::uint64_t getU64(const unsigned char* p);

}  // namespace ddprun::rendezvous::protocol
