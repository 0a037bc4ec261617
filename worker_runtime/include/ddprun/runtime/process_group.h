// The ddprun worker runtime: collectives for C++ programs started by ddprun (or by anything that
// sets the same environment), with no Python anywhere. It is what PyTorch's ProcessGroupNCCL and
// ProcessGroupGloo are to a PyTorch program.
//
//   auto group = ddprun::runtime::ProcessGroup::init();  // RANK, WORLD_SIZE, MASTER_ADDR, ...
//   group->allReduce(grad.data(), grad.size(), ddprun::runtime::ReduceOp::kAvg);
//
// Bootstrap: every rank connects to the store at MASTER_ADDR:MASTER_PORT (the ddprun agent's, or
// one rank 0 starts itself when TORCHELASTIC_USE_AGENT_STORE is not "True", as torch's env://
// does) and exchanges its addresses under keys namespaced by run id and restart generation, so a
// restarted group never reads a stale entry of an earlier one.
//
// Backends: NCCL (GPU; host or device pointers) and Gloo (CPU, TCP; host pointers: a device
// pointer is refused with kInvalidArgument). `kAuto` picks NCCL when the library was built with it
// and a GPU is visible, else Gloo. Every rank must end up with the same backend; init() checks
// that they do and otherwise throws kUnavailable on every rank (set DDPRUN_BACKEND on every node).
// The Gloo backend sets SIGPIPE to ignored if the program left it at its default (which would end
// the process when a peer dies, instead of failing the collective), as Python does for PyTorch.
//
// Device buffers (NCCL): a collective runs after all work issued before the call on the default
// stream (legacy or per-thread) and on any stream created without cudaStreamNonBlocking, since
// the legacy default stream waits for those. Work on the program's own cudaStreamNonBlocking
// streams is not waited for: synchronize it first (cudaStreamSynchronize, or an event the default
// stream waits on). Every call returns only once its result is in the buffer, so whatever the
// program issues afterwards, on any stream, sees it.
//
// Errors: every failure throws ddprun::runtime::RuntimeError. A collective that cannot complete
// because a peer died, hung or was cut off throws kPeerFailure or kTimeout within
// RuntimeOptions::timeout; the group is then broken (every later call throws kPeerFailure) and the
// process should exit non-zero so the ddprun agent restarts the whole group.
//
// Threading: one ProcessGroup is used by one thread at a time; collectives run one after another
// in the order every rank calls them (the same order on every rank, as with MPI or torch).
//
// This header uses only the standard library: no Boost, CUDA, NCCL or Gloo types.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

// The library is built with hidden visibility; this marks what it exports.
#define DDPRUN_RUNTIME_API __attribute__((visibility("default")))

namespace ddprun::runtime {

enum class BackendKind { kAuto, kGloo, kNccl };
enum class DataType { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16 };
// kAvg divides the sum by the world size (integer types: truncated toward zero).
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

// 16-bit floating point values as stored in memory (IEEE binary16 and bfloat16 bit patterns).
struct Half {
  std::uint16_t bits = 0;
};
struct BFloat16 {
  std::uint16_t bits = 0;
};
DDPRUN_RUNTIME_API Half toHalf(float value);
DDPRUN_RUNTIME_API float toFloat(Half value);
DDPRUN_RUNTIME_API BFloat16 toBFloat16(float value);
DDPRUN_RUNTIME_API float toFloat(BFloat16 value);

DDPRUN_RUNTIME_API std::size_t sizeOf(DataType type);
DDPRUN_RUNTIME_API std::string_view toString(BackendKind backend);
DDPRUN_RUNTIME_API std::string_view toString(DataType type);
DDPRUN_RUNTIME_API std::string_view toString(ReduceOp op);
// "auto", "gloo", "nccl" (any case). Throws RuntimeError(kInvalidArgument) naming the choices.
DDPRUN_RUNTIME_API BackendKind parseBackend(std::string_view text);

template <typename T>
constexpr DataType dataTypeOf();
template <>
constexpr DataType dataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType dataTypeOf<std::int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dataTypeOf<std::int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType dataTypeOf<Half>() {
  return DataType::kFloat16;
}
template <>
constexpr DataType dataTypeOf<BFloat16>() {
  return DataType::kBFloat16;
}

class DDPRUN_RUNTIME_API RuntimeError : public std::runtime_error {
 public:
  enum class Kind {
    kInvalidArgument,  // a bad option, environment variable or call argument
    kUnavailable,      // the backend cannot work here (no GPU, no NCCL in this build, ...)
    kTimeout,          // the store or a collective did not complete within the timeout
    kPeerFailure,      // a peer died or the connection to it broke; the group is unusable
  };
  RuntimeError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct DDPRUN_RUNTIME_API RuntimeOptions {
  int rank = -1;
  int worldSize = -1;
  int localRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = -1;
  // Namespace of the bootstrap keys: the job (TORCHELASTIC_RUN_ID) and the restart generation
  // (DDPRUN_GENERATION, else TORCHELASTIC_RESTART_COUNT), so attempts never mix.
  std::string runId = "none";
  int generation = 0;
  // Distinguishes several groups created in one process (each needs its own name).
  std::string groupName = "default";
  BackendKind backend = BackendKind::kAuto;  // DDPRUN_BACKEND
  // Bound on connecting to the store, on bootstrap, and on every collective (DDPRUN_TIMEOUT,
  // seconds). A peer that neither answers nor closes its connection is reported after this long.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Rank 0 starts the store itself at masterAddr:masterPort (torch's env:// without an agent
  // store). False under ddprun, whose agent hosts it (TORCHELASTIC_USE_AGENT_STORE=True).
  bool hostStore = false;
  // Gloo: the address to listen on for peers (DDPRUN_GLOO_ADDR), or the interface whose address to
  // use (GLOO_SOCKET_IFNAME, as in torch). Default: the address this host uses to reach
  // masterAddr, which is right across hosts and network namespaces.
  std::string glooAddress;
  std::string glooInterface;
  // NCCL: the CUDA device (among CUDA_VISIBLE_DEVICES) to use; -1 means localRank.
  int device = -1;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID,
  // DDPRUN_GENERATION / TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_USE_AGENT_STORE,
  // DDPRUN_BACKEND, DDPRUN_TIMEOUT, DDPRUN_GLOO_ADDR, GLOO_SOCKET_IFNAME and DDPRUN_DEVICE.
  // Throws RuntimeError(kInvalidArgument) naming the missing or malformed variable.
  static RuntimeOptions fromEnvironment();
};

// Tells the ddprun agent that this worker makes progress (ddprun --hang-timeout: a worker that
// reported progress and then reports none for that long is hung, its stacks are recorded and the
// group restarts). Every successful collective of a ProcessGroup reports by itself; call this
// from work that runs long without collectives (data loading, evaluation, checkpointing).
// Costs at most one system call per 50 ms, whatever the call rate; nothing without ddprun
// (DDPRUN_HEARTBEAT_FILE unset). Thread-safe; never throws.
DDPRUN_RUNTIME_API void reportProgress() noexcept;

namespace detail {
class Collectives;
}  // namespace detail

class DDPRUN_RUNTIME_API ProcessGroup {
 public:
  // Connects to the store, exchanges addresses with every other rank and opens the backend's
  // connections. Blocks until all worldSize ranks have called it (or options.timeout passes).
  static std::unique_ptr<ProcessGroup> init(const RuntimeOptions& options);
  static std::unique_ptr<ProcessGroup> init() { return init(RuntimeOptions::fromEnvironment()); }

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int worldSize() const;
  BackendKind backend() const;  // the one chosen (never kAuto)
  // NCCL: the CUDA device this rank uses; Gloo: -1.
  int device() const;

  // In place: `data` holds `count` elements of `type` on every rank; afterwards every rank holds
  // the element-wise reduction.
  void allReduce(void* data, std::size_t count, DataType type, ReduceOp op = ReduceOp::kSum);
  // `root`'s `count` elements are copied into `data` on every other rank.
  void broadcast(void* data, std::size_t count, DataType type, int root);
  // Every rank contributes `count` elements; `output` receives worldSize * count elements, rank
  // r's at offset r * count. `input` may alias output + rank * count.
  void allGather(const void* input, void* output, std::size_t count, DataType type);
  // Returns on every rank only after every rank has called it.
  void barrier();
  // Closes the connections. Collective in spirit (call it on every rank). Gloo returns at once;
  // NCCL gives its communicator at most 5 s (less if the timeout is shorter) to finalize with the
  // peers, then aborts it, so a dead peer delays shutdown by at most that. Idempotent; the
  // destructor calls it.
  void shutdown();

  template <typename T>
  void allReduce(T* data, std::size_t count, ReduceOp op = ReduceOp::kSum) {
    allReduce(data, count, dataTypeOf<T>(), op);
  }
  template <typename T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(data, count, dataTypeOf<T>(), root);
  }
  template <typename T>
  void allGather(const T* input, T* output, std::size_t count) {
    allGather(input, output, count, dataTypeOf<T>());
  }

 private:
  explicit ProcessGroup(std::unique_ptr<detail::Collectives> collectives);
  void checkUsable() const;

  std::unique_ptr<detail::Collectives> collectives_;
  bool broken_ = false;
  bool shutDown_ = false;
};

}  // namespace ddprun::runtime
