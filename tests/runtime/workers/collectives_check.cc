// A worker for the runtime tests, run under ddprun: every collective with every data type (and
// every reduce op), on integer-valued data whose results are exact in every type, compared
// element by element; then barrier ordering through marker files in $DDPRUN_CHECK_DIR.
// Prints "rank R: N checks passed" and exits 0, or names the first mismatch and exits 1.
//
//   --device   use GPU buffers (NCCL backend only; the gpu-labelled test)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/runtime/process_group.h"
#if DDPRUN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace ddprun::runtime;

namespace {

int rank = 0;
int world = 1;
int checks = 0;
bool onDevice = false;

[[noreturn]] void mismatch(const std::string& what) {
  std::fprintf(stderr, "rank %d: MISMATCH %s\n", rank, what.c_str());
  std::exit(1);
}

// Element i of a buffer of `type` as a double, and the reverse (values here are small integers,
// exact in every type).
double load(const std::vector<unsigned char>& buffer, DataType type, std::size_t i) {
  const unsigned char* p = buffer.data() + i * sizeOf(type);
  switch (type) {
    case DataType::kFloat32:
      return *reinterpret_cast<const float*>(p);
    case DataType::kFloat64:
      return *reinterpret_cast<const double*>(p);
    case DataType::kInt32:
      return *reinterpret_cast<const std::int32_t*>(p);
    case DataType::kInt64:
      return static_cast<double>(*reinterpret_cast<const std::int64_t*>(p));
    case DataType::kFloat16:
      return toFloat(*reinterpret_cast<const Half*>(p));
    case DataType::kBFloat16:
      return toFloat(*reinterpret_cast<const BFloat16*>(p));
  }
  return 0;
}

void store(std::vector<unsigned char>& buffer, DataType type, std::size_t i, double value) {
  unsigned char* p = buffer.data() + i * sizeOf(type);
  switch (type) {
    case DataType::kFloat32:
      *reinterpret_cast<float*>(p) = static_cast<float>(value);
      break;
    case DataType::kFloat64:
      *reinterpret_cast<double*>(p) = value;
      break;
    case DataType::kInt32:
      *reinterpret_cast<std::int32_t*>(p) = static_cast<std::int32_t>(value);
      break;
    case DataType::kInt64:
      *reinterpret_cast<std::int64_t*>(p) = static_cast<std::int64_t>(value);
      break;
    case DataType::kFloat16:
      *reinterpret_cast<Half*>(p) = toHalf(static_cast<float>(value));
      break;
    case DataType::kBFloat16:
      *reinterpret_cast<BFloat16*>(p) = toBFloat16(static_cast<float>(value));
      break;
  }
}

bool isInteger(DataType type) { return type == DataType::kInt32 || type == DataType::kInt64; }

// Runs `call` on `buffer`, through device memory when --device.
void run(std::vector<unsigned char>& buffer, const std::function<void(void*)>& call) {
#if DDPRUN_TEST_CUDA
  if (onDevice) {
    void* device = nullptr;
    if (cudaMalloc(&device, buffer.size() + 1) != cudaSuccess) mismatch("cudaMalloc failed");
    cudaMemcpy(device, buffer.data(), buffer.size(), cudaMemcpyHostToDevice);
    call(device);
    cudaMemcpy(buffer.data(), device, buffer.size(), cudaMemcpyDeviceToHost);
    cudaFree(device);
    return;
  }
#endif
  call(buffer.data());
}

double value(int r, std::size_t i) {
  return 1 + static_cast<double>((static_cast<std::size_t>(r) + i) % 3);
}

void checkAllReduce(ProcessGroup& group, DataType type, ReduceOp op, std::size_t count) {
  std::vector<unsigned char> buffer(count * sizeOf(type));
  for (std::size_t i = 0; i < count; ++i) store(buffer, type, i, value(rank, i));
  run(buffer, [&](void* data) { group.allReduce(data, count, type, op); });
  for (std::size_t i = 0; i < count; ++i) {
    double expected = value(0, i);
    for (int r = 1; r < world; ++r) {
      const double v = value(r, i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          expected += v;
          break;
        case ReduceOp::kProduct:
          expected *= v;
          break;
        case ReduceOp::kMin:
          expected = std::min(expected, v);
          break;
        case ReduceOp::kMax:
          expected = std::max(expected, v);
          break;
      }
    }
    if (op == ReduceOp::kAvg) {
      expected = isInteger(type) ? static_cast<double>(static_cast<long long>(expected) / world)
                                 : expected / world;
      // The result is the sum divided in the element's own type: round the expectation the same
      // way.
      std::vector<unsigned char> one(sizeOf(type));
      store(one, type, 0, expected);
      expected = load(one, type, 0);
    }
    const double got = load(buffer, type, i);
    if (got != expected) {
      mismatch("all_reduce " + std::string(toString(op)) + " " + std::string(toString(type)) +
               " count " + std::to_string(count) + " element " + std::to_string(i) + ": got " +
               std::to_string(got) + ", expected " + std::to_string(expected));
    }
  }
  ++checks;
}

void checkBroadcast(ProcessGroup& group, DataType type, std::size_t count, int root) {
  std::vector<unsigned char> buffer(count * sizeOf(type));
  for (std::size_t i = 0; i < count; ++i) {
    store(buffer, type, i, rank == root ? root * 16 + static_cast<double>(i % 8) : -1);
  }
  run(buffer, [&](void* data) { group.broadcast(data, count, type, root); });
  for (std::size_t i = 0; i < count; ++i) {
    if (load(buffer, type, i) != root * 16 + static_cast<double>(i % 8)) {
      mismatch("broadcast from " + std::to_string(root) + " " + std::string(toString(type)) +
               " element " + std::to_string(i));
    }
  }
  ++checks;
}

void checkAllGather(ProcessGroup& group, DataType type, std::size_t count, bool inPlace) {
  const std::size_t size = sizeOf(type);
  std::vector<unsigned char> output(count * size * static_cast<std::size_t>(world));
  std::vector<unsigned char> input(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    store(input, type, i, rank * 10 + static_cast<double>(i % 10));
    store(output, type, static_cast<std::size_t>(rank) * count + i, -1);
  }
  if (inPlace) {
    std::copy(input.begin(), input.end(),
              output.begin() + static_cast<std::ptrdiff_t>(rank * count * size));
    run(output, [&](void* out) {
      group.allGather(static_cast<unsigned char*>(out) + rank * count * size, out, count, type);
    });
  } else {
#if DDPRUN_TEST_CUDA
    if (onDevice) {
      void* in = nullptr;
      cudaMalloc(&in, input.size());
      cudaMemcpy(in, input.data(), input.size(), cudaMemcpyHostToDevice);
      run(output, [&](void* out) { group.allGather(in, out, count, type); });
      cudaFree(in);
    } else
#endif
      run(output, [&](void* out) { group.allGather(input.data(), out, count, type); });
  }
  for (int r = 0; r < world; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      if (load(output, type, static_cast<std::size_t>(r) * count + i) !=
          r * 10 + static_cast<double>(i % 10)) {
        mismatch("all_gather " + std::string(inPlace ? "in place " : "") +
                 std::string(toString(type)) + " block " + std::to_string(r) + " element " +
                 std::to_string(i));
      }
    }
  }
  ++checks;
}

void checkBarrierOrdering(ProcessGroup& group) {
  const char* dir = std::getenv("DDPRUN_CHECK_DIR");
  if (dir == nullptr) return;
  for (int round = 0; round < 3; ++round) {
    // The higher ranks arrive first; nobody may leave before the last (rank 0) has arrived.
    std::this_thread::sleep_for(std::chrono::milliseconds(60 * (world - 1 - rank)));
    const auto marker = [&](int r) {
      return std::filesystem::path(dir) /
             ("arrived." + std::to_string(round) + "." + std::to_string(r));
    };
    std::ofstream(marker(rank)).put('x');
    group.barrier();
    for (int r = 0; r < world; ++r) {
      if (!std::filesystem::exists(marker(r))) {
        mismatch("barrier round " + std::to_string(round) + " returned before rank " +
                 std::to_string(r) + " arrived");
      }
    }
    ++checks;
  }
}

}  // namespace

int main(int argc, char** argv) {
  onDevice = argc > 1 && std::string(argv[1]) == "--device";
  try {
    auto group = ProcessGroup::init();
    rank = group->rank();
    world = group->worldSize();
    const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16};
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
    for (DataType type : types) {
      for (ReduceOp op : ops) {
        // 600011 elements pass 1 MiB in every type: all_reduce switches from bcube to ring there.
        for (std::size_t count :
             {std::size_t{1}, std::size_t{7}, std::size_t{100003}, std::size_t{600011}}) {
          checkAllReduce(group.operator*(), type, op, count);
        }
      }
      for (int root = 0; root < world; ++root) checkBroadcast(*group, type, 1001, root);
      checkAllGather(*group, type, 1, false);
      checkAllGather(*group, type, 1001, false);
      checkAllGather(*group, type, 1001, true);
    }
    checkBarrierOrdering(*group);
    group->shutdown();
    std::printf("rank %d: %d checks passed (backend %s, world %d)\n", rank, checks,
                std::string(toString(group->backend())).c_str(), world);
  } catch (const RuntimeError& error) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
    return 1;
  }
  return 0;
}
