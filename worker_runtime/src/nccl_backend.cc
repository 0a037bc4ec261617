// The NCCL backend: GPU collectives on one CUDA device per rank.
//
// The communicator is non-blocking (config.blocking = 0), so nothing here ever waits inside NCCL
// or CUDA: every call is followed by polling the stream and ncclCommGetAsyncError until it is
// done, failed, or the group's timeout passes, and a failure or timeout aborts the communicator
// (ncclCommAbort) instead of hanging, so the agent can restart the group.
//
// Rank 0 creates the ncclUniqueId and publishes it in the store under the bootstrap's prefix,
// which carries the run id and the restart generation: a restarted group never reads the id of
// an earlier one. Host buffers are staged through a device buffer; device buffers are used as is.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "backend.h"
#include "ddprun/rendezvous/errors.h"

namespace ddprun::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kUniqueIdKey = "nccl/unique_id";

ncclDataType_t ncclTypeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

std::string visibleDevices() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value == nullptr ? std::string("unset") : std::string(value);
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const RuntimeOptions& options, Bootstrap bootstrap)
      : rank_(options.rank), worldSize_(options.worldSize), timeout_(options.timeout),
        bootstrap_(std::move(bootstrap)) {
    int count = 0;
    cudaCheck(cudaGetDeviceCount(&count), "cudaGetDeviceCount", RuntimeError::Kind::kUnavailable);
    device_ = options.device >= 0 ? options.device : options.localRank;
    if (device_ >= count) {
      throw RuntimeError(RuntimeError::Kind::kUnavailable,
                         fmt::format("rank {} wants CUDA device {} (LOCAL_RANK/DDPRUN_DEVICE) but "
                                     "only {} GPU(s) are visible (CUDA_VISIBLE_DEVICES={}): start "
                                     "at most {} workers per node (--nproc-per-node {})",
                                     rank_, device_, count, visibleDevices(), count, count));
    }
    cudaCheck(cudaSetDevice(device_), "cudaSetDevice", RuntimeError::Kind::kUnavailable);
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate",
              RuntimeError::Kind::kUnavailable);

    const auto start = Clock::now();
    ncclUniqueId id{};
    try {
      if (rank_ == 0) {
        ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId", start);
        bootstrap_.store->set(kUniqueIdKey, std::string_view(id.internal, sizeof(id.internal)));
      } else {
        const std::string value = bootstrap_.store->get(kUniqueIdKey);
        if (value.size() != sizeof(id.internal)) {
          throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                             fmt::format("the NCCL unique id in the store under {}/{} has {} bytes, "
                                         "not {}: another program wrote that key",
                                         bootstrap_.keyPrefix, kUniqueIdKey, value.size(),
                                         sizeof(id.internal)));
        }
        value.copy(id.internal, sizeof(id.internal));
      }
    } catch (const rendezvous::StoreTimeoutError& error) {
      throw RuntimeError(RuntimeError::Kind::kTimeout,
                         fmt::format("rank {}: rank 0 did not publish the NCCL unique id in time "
                                     "({})", rank_, error.what()));
    } catch (const rendezvous::StoreError& error) {
      throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                         fmt::format("rank {}: NCCL bootstrap through the store failed: {}", rank_,
                                     error.what()));
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclCheck(ncclCommInitRankConfig(&comm_, worldSize_, id, rank_, &config), "ncclCommInitRank",
              start);
    settle("ncclCommInitRank", start);
    cudaCheck(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc", RuntimeError::Kind::kUnavailable);
  }

  ~NcclBackend() override { shutdown(); }

  ddprun::Backend kind() const override { return ddprun::Backend::kNccl; }
  int rank() const override { return rank_; }
  int worldSize() const override { return worldSize_; }
  int device() const override { return device_; }

  void allReduce(void* data, std::size_t count, DataType type, ReduceOp op) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(data, bytes, data, bytes, "all_reduce", [&](const void* in, void* out) {
      return ncclAllReduce(in, out, count, ncclTypeOf(type), ncclOpOf(op), comm_, stream_);
    });
  }

  void broadcast(void* data, std::size_t count, DataType type, int root) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(data, bytes, data, bytes, "broadcast", [&](const void* in, void* out) {
      return ncclBroadcast(in, out, count, ncclTypeOf(type), root, comm_, stream_);
    });
  }

  void allGather(const void* input, void* output, std::size_t count, DataType type) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(input, bytes, output, bytes * static_cast<std::size_t>(worldSize_), "all_gather",
                   [&](const void* in, void* out) {
                     return ncclAllGather(in, out, count, ncclTypeOf(type), comm_, stream_);
                   });
  }

  void barrier() override {
    const auto start = Clock::now();
    ncclCheck(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier",
              start);
    settle("barrier", start);
    complete("barrier", start);
  }

  void shutdown() override {
    if (comm_ != nullptr) {
      // A healthy communicator is finalized (flushing its work) within the timeout, else aborted.
      const auto start = Clock::now();
      ncclResult_t state = ncclCommFinalize(comm_);
      while (state == ncclInProgress && Clock::now() - start < timeout_) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ncclCommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (staging_ != nullptr) cudaFree(staging_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    staging_ = scratch_ = nullptr;
    stream_ = nullptr;
    bootstrap_.store.reset();
    if (bootstrap_.server) bootstrap_.server->stop();
  }

 private:
  static bool isDevicePointer(const void* pointer) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error of an unknown host pointer
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  }

  // Runs `launch(in, out)` on device memory: device buffers as given, host buffers staged
  // (input copied in before, output copied back after the collective completed).
  template <typename Launch>
  void inDeviceMemory(const void* input, std::size_t inBytes, void* output, std::size_t outBytes,
                      const char* what, Launch&& launch) {
    const auto start = Clock::now();
    const bool onDevice = isDevicePointer(input) && isDevicePointer(output);
    if (onDevice) {
      ncclCheck(launch(input, output), what, start);
      settle(what, start);
      complete(what, start);
      return;
    }
    reserveStaging(inBytes + outBytes);
    char* stagedIn = static_cast<char*>(staging_);
    char* stagedOut = stagedIn + inBytes;
    // The same offset of the same buffer stays aliased (in-place and in-place all-gather).
    const char* outBase = static_cast<const char*>(output);
    const char* in = static_cast<const char*>(input);
    if (in >= outBase && in + inBytes <= outBase + outBytes) {
      stagedOut = stagedIn;
      stagedIn = stagedOut + (in - outBase);
      cudaCheck(cudaMemcpyAsync(stagedOut, output, outBytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    } else {
      cudaCheck(cudaMemcpyAsync(stagedIn, input, inBytes, cudaMemcpyHostToDevice, stream_),
                "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    }
    ncclCheck(launch(stagedIn, stagedOut), what, start);
    settle(what, start);
    complete(what, start);
    // Only after the collective is done: a copy into pageable memory blocks the thread, and the
    // timeout must keep running while peers are awaited.
    cudaCheck(cudaMemcpyAsync(output, stagedOut, outBytes, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    complete(what, start);
  }

  void reserveStaging(std::size_t bytes) {
    if (bytes <= stagingBytes_) return;
    if (staging_ != nullptr) cudaFree(staging_);
    staging_ = nullptr;
    stagingBytes_ = 0;
    cudaCheck(cudaMalloc(&staging_, bytes), "cudaMalloc (host buffer staging)",
              RuntimeError::Kind::kUnavailable);
    stagingBytes_ = bytes;
  }

  // Waits until a non-blocking NCCL call has been fully enqueued.
  void settle(const char* what, Clock::time_point start) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, start, state);
      if (Clock::now() - start > timeout_) timedOut(what, start);
      std::this_thread::yield();
    }
  }

  // Waits until the stream has run everything enqueued, watching for NCCL's async errors.
  void complete(const char* what, Clock::time_point start) {
    for (int spins = 0;; ++spins) {
      const cudaError_t query = cudaStreamQuery(stream_);
      if (query == cudaSuccess) return;
      if (query != cudaErrorNotReady) {
        abort();
        throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                           fmt::format("nccl {} failed on rank {}: CUDA error {}", what, rank_,
                                       cudaGetErrorString(query)));
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(what, start, state);
      if (Clock::now() - start > timeout_) timedOut(what, start);
      // Spin briefly (small collectives finish in microseconds), then stop burning the CPU.
      if (spins < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void ncclCheck(ncclResult_t result, const char* what, Clock::time_point start) {
    if (result != ncclSuccess && result != ncclInProgress) fail(what, start, result);
  }

  void cudaCheck(cudaError_t result, const char* what, RuntimeError::Kind kind) {
    if (result == cudaSuccess) return;
    throw RuntimeError(kind, fmt::format("rank {}: {} failed: {} (CUDA_VISIBLE_DEVICES={})", rank_,
                                         what, cudaGetErrorString(result), visibleDevices()));
  }

  [[noreturn]] void fail(const char* what, Clock::time_point start, ncclResult_t result) {
    const std::string last = comm_ != nullptr ? ncclGetLastError(comm_) : "";
    abort();
    throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                       fmt::format("nccl {} failed on rank {} of {} after {} ms: {}{}{}", what, rank_,
                                   worldSize_, elapsedMs(start), ncclGetErrorString(result),
                                   last.empty() ? "" : ": ", last));
  }

  [[noreturn]] void timedOut(const char* what, Clock::time_point start) {
    abort();
    throw RuntimeError(RuntimeError::Kind::kTimeout,
                       fmt::format("nccl {} on rank {} of {} did not complete within {} ms (a peer "
                                   "hung or died): the communicator was aborted; raise "
                                   "DDPRUN_TIMEOUT if it was only slow",
                                   what, rank_, worldSize_, elapsedMs(start)));
  }

  void abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  static long long elapsedMs(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  }

  int rank_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
  Bootstrap bootstrap_;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* staging_ = nullptr;
  std::size_t stagingBytes_ = 0;
  void* scratch_ = nullptr;
};

}  // namespace

bool builtWithNccl() { return true; }

std::string ncclUnusableReason() {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no GPU is usable ({})", cudaGetErrorString(result));
  }
  if (count == 0) return "no GPU is visible (CUDA_VISIBLE_DEVICES=" + visibleDevices() + ")";
  return {};
}

std::unique_ptr<Backend> makeNcclBackend(const RuntimeOptions& options, Bootstrap bootstrap) {
  return std::make_unique<NcclBackend>(options, std::move(bootstrap));
}

}  // namespace ddprun::detail
