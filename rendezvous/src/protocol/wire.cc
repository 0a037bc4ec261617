#include "protocol/wire.h"

#include <array>
#include <bit>
#include <cstring>

namespace ddprun::rendezvous {

std::string_view dialectName(WireDialect dialect) {
  return dialect == WireDialect::kTorch113 ? "torch-1.13" : "torch-2.x";
}

namespace protocol {
namespace {

// Wire code -> op, one table per dialect. Index = wire code.
constexpr std::array<Op, 9> kTorch113Ops = {
    Op::kSet,  Op::kCompareSet, Op::kGet,      Op::kAdd,       Op::kCheck,
    Op::kWait, Op::kNumKeys,    Op::kWatchKey, Op::kDeleteKey,
};
constexpr std::array<Op, 19> kTorch2Ops = {
    Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,
    Op::kCheck,    Op::kWait,     Op::kNumKeys,    Op::kDeleteKey, Op::kAppend,
    Op::kMultiGet, Op::kMultiSet, Op::kCancelWait, Op::kPing,      Op::kQueuePush,
    Op::kQueuePop, Op::kQueueLen, Op::kListKeys,   Op::kBarrier,
};

template <std::size_t N>
std::optional<std::uint8_t> findCode(const std::array<Op, N>& table, Op op) {
  for (std::size_t i = 0; i < N; ++i) {
    if (table[i] == op) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

}  // namespace

std::string_view opName(Op op) {
  switch (op) {
    case Op::kValidate:
      return "VALIDATE";
    case Op::kSet:
      return "SET";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kNumKeys:
      return "GETNUMKEYS";
    case Op::kWatchKey:
      return "WATCH_KEY";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kAppend:
      return "APPEND";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kCancelWait:
      return "CANCEL_WAIT";
    case Op::kPing:
      return "PING";
    case Op::kQueuePush:
      return "QUEUE_PUSH";
    case Op::kQueuePop:
      return "QUEUE_POP";
    case Op::kQueueLen:
      return "QUEUE_LEN";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kHold:
      return "HOLD";
    case Op::kRelease:
      return "RELEASE";
    case Op::kListPrefix:
      return "LIST_PREFIX";
    case Op::kDeletePrefix:
      return "DELETE_PREFIX";
  }
  return "?";
}

std::optional<Op> opFromWire(WireDialect dialect, std::uint8_t code) {
  if (dialect == WireDialect::kTorch113) {
    if (code < kTorch113Ops.size()) return kTorch113Ops[code];
    return std::nullopt;
  }
  if (code < kTorch2Ops.size()) return kTorch2Ops[code];
  if (code == ddprun_ext::kHold) return Op::kHold;
  if (code == ddprun_ext::kRelease) return Op::kRelease;
  if (code == ddprun_ext::kListPrefix) return Op::kListPrefix;
  if (code == ddprun_ext::kDeletePrefix) return Op::kDeletePrefix;
  return std::nullopt;
}

std::optional<std::uint8_t> wireCode(WireDialect dialect, Op op) {
  if (dialect == WireDialect::kTorch113) return findCode(kTorch113Ops, op);
  if (op == Op::kHold) return ddprun_ext::kHold;
  if (op == Op::kRelease) return ddprun_ext::kRelease;
  if (op == Op::kListPrefix) return ddprun_ext::kListPrefix;
  if (op == Op::kDeletePrefix) return ddprun_ext::kDeletePrefix;
  return findCode(kTorch2Ops, op);
}

void putU8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }

namespace {

// The wire is little-endian; on the (little-endian) hosts ddprun runs on this is a plain copy.
std::uint32_t toLittleEndian(std::uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap32(v);
  return v;
}

std::uint64_t toLittleEndian(std::uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
  return v;
}

}  // namespace

void putU32(std::string& out, std::uint32_t v) {
  v = toLittleEndian(v);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void putU64(std::string& out, std::uint64_t v) {
  v = toLittleEndian(v);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void putBlob(std::string& out, std::string_view bytes) {
  putU64(out, bytes.size());
  out.append(bytes);
}

std::uint32_t getU32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return toLittleEndian(v);
}

std::uint64_t getU64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return toLittleEndian(v);
}

}  // namespace protocol
}  // namespace ddprun::rendezvous
