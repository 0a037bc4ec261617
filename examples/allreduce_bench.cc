// All-reduce bandwidth under ddprun, in the style of nccl-tests' all_reduce_perf: for each size
// from --min-bytes to --max-bytes (doubling), the time of one in-place float32 sum all-reduce,
// averaged over many iterations and taken from the slowest rank, with
//   algbw = bytes / time      busbw = algbw * 2 (n - 1) / n
// (busbw is what each link carries in a ring; it is comparable across world sizes).
//
//   ddprun --standalone --nproc-per-node 4 allreduce_bench [--min-bytes 1K] [--max-bytes 256M]
//          [--csv] [--device]          (--device: GPU buffers; needs the NCCL backend)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/runtime/process_group.h"
#if DDPRUN_EXAMPLE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

std::size_t parseBytes(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string unit = end;
  if (unit == "K" || unit == "k")
    value *= 1024;
  else if (unit == "M" || unit == "m")
    value *= 1024 * 1024;
  else if (unit == "G" || unit == "g")
    value *= 1024.0 * 1024 * 1024;
  else if (!unit.empty()) {
    std::fprintf(stderr, "allreduce_bench: '%s' is not a size (e.g. 1024, 64K, 256M)\n",
                 text.c_str());
    std::exit(2);
  }
  return static_cast<std::size_t>(value);
}

// Enough iterations to dwarf the timer for small sizes, few for the large ones.
int iterationsFor(std::size_t bytes) {
  const std::size_t budget = std::size_t{256} << 20;  // bytes moved per size, roughly
  return static_cast<int>(std::clamp<std::size_t>(budget / bytes, 5, 2000));
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t minBytes = 1024;
  std::size_t maxBytes = std::size_t{256} << 20;
  bool csv = false;
  bool onDevice = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--min-bytes" && i + 1 < argc)
      minBytes = parseBytes(argv[++i]);
    else if (arg == "--max-bytes" && i + 1 < argc)
      maxBytes = parseBytes(argv[++i]);
    else if (arg == "--csv")
      csv = true;
    else if (arg == "--device")
      onDevice = true;
    else {
      std::fprintf(stderr,
                   "usage: allreduce_bench [--min-bytes N] [--max-bytes N] [--csv] [--device]\n");
      return 2;
    }
  }
  minBytes = std::max<std::size_t>(minBytes, sizeof(float));

  using ddprun::runtime::ReduceOp;
  try {
    auto group = ddprun::runtime::ProcessGroup::init();
    const int rank = group->rank();
    const int world = group->worldSize();

    std::vector<float> host(maxBytes / sizeof(float), 1.0f);
    float* data = host.data();
#if DDPRUN_EXAMPLE_CUDA
    if (onDevice) {
      void* device = nullptr;
      if (cudaMalloc(&device, maxBytes) != cudaSuccess) {
        std::fprintf(stderr, "allreduce_bench: cudaMalloc of %zu bytes failed\n", maxBytes);
        return 1;
      }
      cudaMemcpy(device, host.data(), maxBytes, cudaMemcpyHostToDevice);
      data = static_cast<float*>(device);
    }
#else
    if (onDevice) {
      std::fprintf(stderr, "allreduce_bench: --device needs a build with CUDA and NCCL\n");
      return 2;
    }
#endif

    if (rank == 0) {
      if (csv) {
        std::printf("impl,ranks,bytes,iterations,time_us,algbw_gbps,busbw_gbps\n");
      } else {
        std::printf("# ddprun all_reduce (sum, float32, in place), %d ranks, backend %s\n", world,
                    std::string(ddprun::runtime::toString(group->backend())).c_str());
        std::printf("%12s %10s %8s %12s %12s %12s\n", "bytes", "count", "iters", "time_us",
                    "algbw_GB/s", "busbw_GB/s");
      }
    }
    for (std::size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
      const std::size_t count = bytes / sizeof(float);
      const int iterations = iterationsFor(bytes);
      for (int w = 0; w < 3; ++w) group->allReduce(data, count, ReduceOp::kSum);  // warm up
      group->barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int it = 0; it < iterations; ++it) group->allReduce(data, count, ReduceOp::kSum);
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      group->allReduce(&seconds, 1, ReduceOp::kMax);  // the slowest rank sets the pace
      const double perOp = seconds / iterations;
      const double algbw = static_cast<double>(bytes) / perOp / 1e9;
      const double busbw = algbw * 2.0 * (world - 1) / world;
      if (rank == 0) {
        if (csv) {
          std::printf("ddprun,%d,%zu,%d,%.3f,%.4f,%.4f\n", world, bytes, iterations, perOp * 1e6,
                      algbw, busbw);
        } else {
          std::printf("%12zu %10zu %8d %12.2f %12.4f %12.4f\n", bytes, count, iterations,
                      perOp * 1e6, algbw, busbw);
        }
        std::fflush(stdout);
      }
      // Keep the values bounded (sums of ones grow by `world` each iteration).
      if (!onDevice)
        std::fill(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(count), 1.0f);
    }
    group->shutdown();
  } catch (const ddprun::runtime::RuntimeError& error) {
    std::fprintf(stderr, "allreduce_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
