// Data types, reduction ops and backends: sizes, names, parsing, and 16-bit float conversions.
#include <bit>
#include <cctype>
#include <cmath>
#include <string>

#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime {

Half toHalf(float value) {
  // IEEE binary32 -> binary16, round to nearest even (overflow -> inf, underflow -> subnormal/0).
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t mantissa = x & 0x7fffffu;
  const int exponent = static_cast<int>((x >> 23) & 0xffu);
  if (exponent == 0xff) {  // inf or NaN (NaN stays a quiet NaN)
    return Half{static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u : 0u))};
  }
  const int halfExponent = exponent - 127 + 15;
  if (halfExponent >= 0x1f) {
    return Half{static_cast<std::uint16_t>(sign | 0x7c00u)};
  }
  if (halfExponent <= 0) {  // subnormal in binary16, or zero
    if (halfExponent < -10) {
      return Half{static_cast<std::uint16_t>(sign)};
    }
    mantissa |= 0x800000u;  // the implicit leading bit
    const int shift = 14 - halfExponent;
    std::uint32_t bits = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (bits & 1u) != 0)) {
      ++bits;
    }
    return Half{static_cast<std::uint16_t>(sign | bits)};
  }
  std::uint32_t bits = sign | (static_cast<std::uint32_t>(halfExponent) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u) != 0)) {
    ++bits;  // a carry into the exponent is the correct rounding (up to inf)
  }
  return Half{static_cast<std::uint16_t>(bits)};
}

float toFloat(Half value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

BFloat16 toBFloat16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) {
    return BFloat16{static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | 0x7fc0u)};
  }
  const std::uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);  // nearest even
  return BFloat16{static_cast<std::uint16_t>((x + roundingBias) >> 16)};
}

float toFloat(BFloat16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

std::size_t sizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
  }
  throw RuntimeError(RuntimeError::Kind::kInvalidArgument, "unknown ddprun::runtime::DataType");
}

std::string_view toString(BackendKind backend) {
  switch (backend) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kGloo:
      return "gloo";
    case BackendKind::kNccl:
      return "nccl";
  }
  return "?";
}

std::string_view toString(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

std::string_view toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

BackendKind parseBackend(std::string_view text) {
  std::string lower;
  for (char c : text) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (lower == "auto" || lower.empty()) return BackendKind::kAuto;
  if (lower == "gloo") return BackendKind::kGloo;
  if (lower == "nccl") return BackendKind::kNccl;
  throw RuntimeError(RuntimeError::Kind::kInvalidArgument,
                     "unknown backend '" + std::string(text) + "': use auto, gloo or nccl");
}

}  // namespace ddprun::runtime
