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
//
// Ordering: the runtime's stream is non-blocking, so each collective first makes it wait for an
// event recorded on the legacy default stream. That orders it after everything the caller issued
// before the call on the default stream (legacy or per-thread) and on every blocking stream, since
// the legacy default stream itself waits for those. Work on the caller's cudaStreamNonBlocking
// streams is the caller's to synchronize (documented in process_group.h).
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>

#include "collectives.h"
#include "ddprun/common/worker_env_names.h"
#include "ddprun/rendezvous/errors.h"

namespace ddprun::runtime::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kUniqueIdKey = "nccl/unique_id";
// How long shutdown lets a healthy communicator finalize. ncclCommFinalize waits until every peer
// has finalized too, so a dead peer would stall it; every collective has completed by then, so
// this only covers peers that are a little later to shut down, and then it is aborted.
constexpr std::chrono::milliseconds kFinalizeGrace = std::chrono::seconds(5);

// Owners of CUDA and NCCL handles, so that a constructor that throws halfway leaks nothing.
struct StreamDestroy {
  void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
};
struct EventDestroy {
  void operator()(cudaEvent_t event) const { cudaEventDestroy(event); }
};
struct DeviceFree {
  void operator()(void* memory) const { cudaFree(memory); }
};
struct CommAbort {
  void operator()(ncclComm_t comm) const { ncclCommAbort(comm); }
};
using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;
using DeviceMemory = std::unique_ptr<void, DeviceFree>;
using Comm = std::unique_ptr<std::remove_pointer_t<ncclComm_t>, CommAbort>;

// Makes `device` current on the calling thread for one call and restores the caller's device:
// collectives may come from another thread than init(), and the event, the staging buffer and the
// default stream the collective waits for must all be on the communicator's device.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) {
      previous_ = -1;
      return;
    }
    cudaSetDevice(device);
  }
  ~CurrentDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

// Polling: spin briefly (small operations finish in microseconds), then sleep, longer as the wait
// grows (bootstrap and large collectives take milliseconds to seconds), so as not to burn a core.
void backoff(int spins) {
  if (spins < 1000) {
    std::this_thread::yield();
  } else if (spins < 10000) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

ncclDataType_t ncclTypeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

std::string visibleDevices() {
  const char* value = std::getenv(common::kEnvCudaVisibleDevices);
  return value == nullptr ? std::string("unset") : std::string(value);
}

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(const RuntimeOptions& options, Bootstrap bootstrap)
      : rank_(options.rank),
        worldSize_(options.worldSize),
        timeout_(options.timeout),
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
    cudaStream_t stream = nullptr;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate",
              RuntimeError::Kind::kUnavailable);
    stream_.reset(stream);
    cudaEvent_t event = nullptr;
    cudaCheck(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate",
              RuntimeError::Kind::kUnavailable);
    callerWork_.reset(event);
    void* scratch = nullptr;
    cudaCheck(cudaMalloc(&scratch, sizeof(float)), "cudaMalloc", RuntimeError::Kind::kUnavailable);
    scratch_.reset(scratch);

    const auto start = Clock::now();
    ncclUniqueId id{};
    try {
      if (rank_ == 0) {
        ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId", start);
        bootstrap_.store->set(kUniqueIdKey, std::string_view(id.internal, sizeof(id.internal)));
      } else {
        const std::string value = bootstrap_.store->get(kUniqueIdKey);
        if (value.size() != sizeof(id.internal)) {
          throw RuntimeError(
              RuntimeError::Kind::kPeerFailure,
              fmt::format("the NCCL unique id in the store under {}/{} has {} bytes, "
                          "not {}: another program wrote that key",
                          bootstrap_.keyPrefix, kUniqueIdKey, value.size(), sizeof(id.internal)));
        }
        value.copy(id.internal, sizeof(id.internal));
      }
    } catch (const rendezvous::StoreTimeoutError& error) {
      throw RuntimeError(RuntimeError::Kind::kTimeout,
                         fmt::format("rank {}: rank 0 did not publish the NCCL unique id in time "
                                     "({})",
                                     rank_, error.what()));
    } catch (const rendezvous::StoreError& error) {
      throw RuntimeError(
          RuntimeError::Kind::kPeerFailure,
          fmt::format("rank {}: NCCL bootstrap through the store failed: {}", rank_, error.what()));
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommInitRankConfig(&comm, worldSize_, id, rank_, &config);
    comm_.reset(comm);
    ncclCheck(result, "ncclCommInitRank", start);
    settle("ncclCommInitRank", start);
  }

  ~NcclCollectives() override { shutdown(); }

  BackendKind kind() const override { return BackendKind::kNccl; }
  int rank() const override { return rank_; }
  int worldSize() const override { return worldSize_; }
  int device() const override { return device_; }

  void allReduce(void* data, std::size_t count, DataType type, ReduceOp op) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(data, bytes, data, bytes, "all_reduce", [&](const void* in, void* out) {
      return ncclAllReduce(in, out, count, ncclTypeOf(type), ncclOpOf(op), comm_.get(),
                           stream_.get());
    });
  }

  void broadcast(void* data, std::size_t count, DataType type, int root) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(data, bytes, data, bytes, "broadcast", [&](const void* in, void* out) {
      return ncclBroadcast(in, out, count, ncclTypeOf(type), root, comm_.get(), stream_.get());
    });
  }

  void allGather(const void* input, void* output, std::size_t count, DataType type) override {
    const std::size_t bytes = count * sizeOf(type);
    inDeviceMemory(input, bytes, output, bytes * static_cast<std::size_t>(worldSize_), "all_gather",
                   [&](const void* in, void* out) {
                     return ncclAllGather(in, out, count, ncclTypeOf(type), comm_.get(),
                                          stream_.get());
                   });
  }

  void barrier() override {
    const auto start = Clock::now();
    const CurrentDevice current(device_);
    ncclCheck(ncclAllReduce(scratch_.get(), scratch_.get(), 1, ncclFloat32, ncclSum, comm_.get(),
                            stream_.get()),
              "barrier", start);
    settle("barrier", start);
    complete("barrier", start);
  }

  void shutdown() override {
    const CurrentDevice current(device_);
    if (comm_ != nullptr) {
      // Every collective has completed; finalizing flushes NCCL's last network operations, but
      // waits for every peer, so a dead one is given up on after a short grace: aborted instead.
      const auto start = Clock::now();
      const auto grace = std::min(timeout_, kFinalizeGrace);
      ncclResult_t state = ncclCommFinalize(comm_.get());
      for (int spins = 0; state == ncclInProgress && Clock::now() - start < grace; ++spins) {
        backoff(spins);
        ncclCommGetAsyncError(comm_.get(), &state);
      }
      if (state == ncclSuccess) ncclCommDestroy(comm_.release());
      comm_.reset();  // aborts one that did not finalize
    }
    staging_.reset();
    stagingBytes_ = 0;
    scratch_.reset();
    callerWork_.reset();
    stream_.reset();
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
  // The whole operation runs on stream_ after the caller's default-stream work (see the top of
  // this file) and has completed when this returns.
  template <typename Launch>
  void inDeviceMemory(const void* input, std::size_t inBytes, void* output, std::size_t outBytes,
                      const char* what, Launch&& launch) {
    const auto start = Clock::now();
    const CurrentDevice current(device_);
    cudaCheck(cudaEventRecord(callerWork_.get(), cudaStreamLegacy), "cudaEventRecord",
              RuntimeError::Kind::kPeerFailure);
    cudaCheck(cudaStreamWaitEvent(stream_.get(), callerWork_.get(), 0), "cudaStreamWaitEvent",
              RuntimeError::Kind::kPeerFailure);
    const bool onDevice = isDevicePointer(input) && isDevicePointer(output);
    if (onDevice) {
      ncclCheck(launch(input, output), what, start);
      settle(what, start);
      complete(what, start);
      return;
    }
    // Staged: either buffer may still be device memory (a host input with a device output, or
    // the reverse), so the copies let CUDA tell the direction from the addresses.
    reserveStaging(inBytes + outBytes);
    char* stagedIn = static_cast<char*>(staging_.get());
    char* stagedOut = stagedIn + inBytes;
    // The same offset of the same buffer stays aliased (in-place and in-place all-gather).
    const char* outBase = static_cast<const char*>(output);
    const char* in = static_cast<const char*>(input);
    if (in >= outBase && in + inBytes <= outBase + outBytes) {
      stagedOut = stagedIn;
      stagedIn = stagedOut + (in - outBase);
      cudaCheck(cudaMemcpyAsync(stagedOut, output, outBytes, cudaMemcpyDefault, stream_.get()),
                "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    } else {
      cudaCheck(cudaMemcpyAsync(stagedIn, input, inBytes, cudaMemcpyDefault, stream_.get()),
                "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    }
    ncclCheck(launch(stagedIn, stagedOut), what, start);
    settle(what, start);
    complete(what, start);
    // Only after the collective is done: a copy into pageable memory blocks the thread, and the
    // timeout must keep running while peers are awaited.
    cudaCheck(cudaMemcpyAsync(output, stagedOut, outBytes, cudaMemcpyDefault, stream_.get()),
              "cudaMemcpyAsync", RuntimeError::Kind::kPeerFailure);
    complete(what, start);
  }

  void reserveStaging(std::size_t bytes) {
    if (bytes <= stagingBytes_) return;
    staging_.reset();
    stagingBytes_ = 0;
    void* staging = nullptr;
    cudaCheck(cudaMalloc(&staging, bytes), "cudaMalloc (host buffer staging)",
              RuntimeError::Kind::kUnavailable);
    staging_.reset(staging);
    stagingBytes_ = bytes;
  }

  // Waits until a non-blocking NCCL call has been fully enqueued.
  void settle(const char* what, Clock::time_point start) {
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_.get(), &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, start, state);
      if (Clock::now() - start > timeout_) timedOut(what, start);
      backoff(spins);
    }
  }

  // Waits until the stream has run everything enqueued, checking for NCCL's async errors.
  void complete(const char* what, Clock::time_point start) {
    for (int spins = 0;; ++spins) {
      const cudaError_t query = cudaStreamQuery(stream_.get());
      if (query == cudaSuccess) return;
      if (query != cudaErrorNotReady) {
        abort();
        throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                           fmt::format("nccl {} failed on rank {}: CUDA error {}", what, rank_,
                                       cudaGetErrorString(query)));
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_.get(), &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(what, start, state);
      if (Clock::now() - start > timeout_) timedOut(what, start);
      backoff(spins);
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
    const std::string last = comm_ != nullptr ? ncclGetLastError(comm_.get()) : "";
    abort();
    throw RuntimeError(
        RuntimeError::Kind::kPeerFailure,
        fmt::format("nccl {} failed on rank {} of {} after {} ms: {}{}{}", what, rank_, worldSize_,
                    elapsedMs(start), ncclGetErrorString(result), last.empty() ? "" : ": ", last));
  }

  [[noreturn]] void timedOut(const char* what, Clock::time_point start) {
    abort();
    throw RuntimeError(RuntimeError::Kind::kTimeout,
                       fmt::format("nccl {} on rank {} of {} did not complete within {} ms (a peer "
                                   "hung or died): the communicator was aborted; raise "
                                   "DDPRUN_TIMEOUT if it was only slow",
                                   what, rank_, worldSize_, elapsedMs(start)));
  }

  void abort() { comm_.reset(); }

  static long long elapsedMs(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  }

  int rank_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
  Bootstrap bootstrap_;
  int device_ = -1;
  Stream stream_;
  Event callerWork_;  // recorded on the legacy default stream; stream_ waits for it
  DeviceMemory scratch_;
  DeviceMemory staging_;
  std::size_t stagingBytes_ = 0;
  Comm comm_;  // last: aborted before the memory and the stream it uses are released
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

std::unique_ptr<Collectives> makeNcclCollectives(const RuntimeOptions& options,
                                                 Bootstrap bootstrap) {
  return std::make_unique<NcclCollectives>(options, std::move(bootstrap));
}

}  // namespace ddprun::runtime::detail
