// Element-wise reductions on host memory, for the Gloo backend: gloo calls them with
// (out, a, b, n) while it combines the chunks of the ring. 16-bit floats are computed in float and
// rounded back after each step, as NCCL and PyTorch do.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime::detail {

using HostReduceFunction = void (*)(void* out, const void* a, const void* b, std::size_t n);

template <typename T>
struct Native {
  using Value = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
struct HalfAsFloat {
  using Value = float;
  static float load(Half v) { return toFloat(v); }
  static Half store(float v) { return toHalf(v); }
};
struct BFloat16AsFloat {
  using Value = float;
  static float load(BFloat16 v) { return toFloat(v); }
  static BFloat16 store(float v) { return toBFloat16(v); }
};

struct Plus {
  template <typename V>
  V operator()(V a, V b) const {
    return a + b;
  }
};
struct Times {
  template <typename V>
  V operator()(V a, V b) const {
    return a * b;
  }
};
struct Min {
  template <typename V>
  V operator()(V a, V b) const {
    return std::min(a, b);
  }
};
struct Max {
  template <typename V>
  V operator()(V a, V b) const {
    return std::max(a, b);
  }
};

// `Storage` is the element type in memory; `Codec` maps it to the type the arithmetic runs in.
template <typename Storage, typename Codec, typename Op>
void reduceElements(void* out, const void* a, const void* b, std::size_t n) {
  // gloo hands us pointers into the user's buffer and its own, all element-aligned.
  auto* o = static_cast<Storage*>(out);
  const auto* x = static_cast<const Storage*>(a);
  const auto* y = static_cast<const Storage*>(b);
  const Op op;
  for (std::size_t i = 0; i < n; ++i) {
    o[i] = Codec::store(op(Codec::load(x[i]), Codec::load(y[i])));
  }
}

template <typename Storage, typename Codec>
HostReduceFunction reduceFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // the sum, divided afterwards by divideElements
      return &reduceElements<Storage, Codec, Plus>;
    case ReduceOp::kProduct:
      return &reduceElements<Storage, Codec, Times>;
    case ReduceOp::kMin:
      return &reduceElements<Storage, Codec, Min>;
    case ReduceOp::kMax:
      return &reduceElements<Storage, Codec, Max>;
  }
  return nullptr;
}

inline HostReduceFunction hostReduceFunction(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return reduceFor<float, Native<float>>(op);
    case DataType::kFloat64:
      return reduceFor<double, Native<double>>(op);
    case DataType::kInt32:
      return reduceFor<std::int32_t, Native<std::int32_t>>(op);
    case DataType::kInt64:
      return reduceFor<std::int64_t, Native<std::int64_t>>(op);
    case DataType::kFloat16:
      return reduceFor<Half, HalfAsFloat>(op);
    case DataType::kBFloat16:
      return reduceFor<BFloat16, BFloat16AsFloat>(op);
  }
  return nullptr;
}

template <typename Storage, typename Codec>
void divideAll(void* data, std::size_t n, int divisor) {
  auto* values = static_cast<Storage*>(data);
  using Value = typename Codec::Value;
  for (std::size_t i = 0; i < n; ++i) {
    values[i] =
        Codec::store(static_cast<Value>(Codec::load(values[i]) / static_cast<Value>(divisor)));
  }
}

// kAvg's second step: every element divided by the world size (integers truncate toward zero).
inline void divideElements(void* data, std::size_t n, DataType type, int divisor) {
  switch (type) {
    case DataType::kFloat32:
      return divideAll<float, Native<float>>(data, n, divisor);
    case DataType::kFloat64:
      return divideAll<double, Native<double>>(data, n, divisor);
    case DataType::kInt32:
      return divideAll<std::int32_t, Native<std::int32_t>>(data, n, divisor);
    case DataType::kInt64:
      return divideAll<std::int64_t, Native<std::int64_t>>(data, n, divisor);
    case DataType::kFloat16:
      return divideAll<Half, HalfAsFloat>(data, n, divisor);
    case DataType::kBFloat16:
      return divideAll<BFloat16, BFloat16AsFloat>(data, n, divisor);
  }
}

}  // namespace ddprun::runtime::detail
