// The Gloo backend: CPU collectives over Gloo's TCP transport (Debian's libgloo).
//
// Rendezvous goes through GlooStore, an adapter from ddprun's Store to gloo's store interface,
// under the bootstrap's namespaced prefix. Every operation carries the group's timeout, so a peer
// that hangs is reported after at most that long; a peer that dies closes its sockets and is
// reported at once. Gloo's exceptions become RuntimeError here and nowhere else. Gloo touches
// buffers from the CPU, so a CUDA device pointer is refused before it gets one (isDeviceMemory).
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives.h"
#include "ddprun/common/local_address.h"
#include "ddprun/rendezvous/errors.h"
#include "host_reduce.h"

namespace ddprun::runtime::detail {
namespace {

using Clock = std::chrono::steady_clock;

// gloo::rendezvous::Store on top of a ddprun Store. Blocking reads honour the group's timeout.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({key}, timeout_);
    const std::string value = store_->get(key);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<rendezvous::Store> store_;
  std::chrono::milliseconds timeout_;
};

// Gloo writes to its sockets with writev, which raises SIGPIPE once a peer is gone, and SIGPIPE's
// default action ends the process before the failed write can fail the collective. Python ignores
// SIGPIPE in every PyTorch program; a C++ program gets the same here, unless it chose a
// disposition of its own.
void ignoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

// Up to this size all_reduce uses Gloo's bcube algorithm (recursive halving and doubling: about
// log2(n) exchange steps), above it Gloo's ring (2n segments passed along n ranks; what torch's
// ProcessGroupGloo uses at every size). Small messages are all latency, and every step costs a
// round trip plus a wake-up of Gloo's I/O thread, so bcube is the faster up to 1 MiB; ring wins
// for large messages, which bcube does not pipeline (docs/benchmarks.md, "Worker runtime").
constexpr std::size_t kBcubeMaxBytes = std::size_t{1} << 20;
// The ring's segments: Gloo's default is 1 MiB; 4 MiB halves the messages, syscalls and I/O-thread
// wake-ups per byte while two segments stay in flight. Much larger segments lose the pipelining
// on large messages.
constexpr std::size_t kRingSegmentBytes = std::size_t{4} << 20;

// Gloo's option setters are templates on the element type but only use its size.
template <typename Options>
void setOutput(Options& options, void* data, std::size_t count, DataType type) {
  switch (sizeOf(type)) {
    case 2:
      options.setOutput(static_cast<std::uint16_t*>(data), count);
      break;
    case 4:
      options.setOutput(static_cast<std::uint32_t*>(data), count);
      break;
    default:
      options.setOutput(static_cast<std::uint64_t*>(data), count);
      break;
  }
}
template <typename Options>
void setInput(Options& options, const void* data, std::size_t count, DataType type) {
  // Gloo takes non-const pointers but does not write through an input buffer.
  void* input = const_cast<void*>(data);
  switch (sizeOf(type)) {
    case 2:
      options.setInput(static_cast<std::uint16_t*>(input), count);
      break;
    case 4:
      options.setInput(static_cast<std::uint32_t*>(input), count);
      break;
    default:
      options.setInput(static_cast<std::uint64_t*>(input), count);
      break;
  }
}

class GlooCollectives final : public Collectives {
 public:
  GlooCollectives(const RuntimeOptions& options, Bootstrap bootstrap)
      : rank_(options.rank),
        worldSize_(options.worldSize),
        timeout_(options.timeout),
        bootstrap_(std::move(bootstrap)) {
    gloo::transport::tcp::attr attr;
    if (!options.glooInterface.empty()) {
      attr.iface = options.glooInterface;
    } else {
      // The address peers on other hosts or network namespaces can reach us at.
      attr.hostname = !options.glooAddress.empty()
                          ? options.glooAddress
                          : common::localAddressToward(
                                options.masterAddr, static_cast<std::uint16_t>(options.masterPort))
                                .value_or("");
    }
    ignoreSigpipeUnlessHandled();
    const auto start = Clock::now();
    guarded("bootstrap", start, [&] {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank_, worldSize_);
      context_->setTimeout(timeout_);
      GlooStore store(bootstrap_.store, timeout_);
      context_->connectFullMesh(store, device_);
    });
  }

  BackendKind kind() const override { return BackendKind::kGloo; }
  int rank() const override { return rank_; }
  int worldSize() const override { return worldSize_; }

  void allReduce(void* data, std::size_t count, DataType type, ReduceOp op) override {
    requireHostMemory("all_reduce", data);
    guarded("all_reduce", Clock::now(), [&] {
      gloo::AllreduceOptions options(context_);
      setOutput(options, data, count, type);
      options.setReduceFunction(hostReduceFunction(type, op));
      options.setAlgorithm(count * sizeOf(type) <= kBcubeMaxBytes
                               ? gloo::AllreduceOptions::Algorithm::BCUBE
                               : gloo::AllreduceOptions::Algorithm::RING);
      options.setMaxSegmentSize(kRingSegmentBytes);
      options.setTag(nextTag());
      options.setTimeout(timeout_);
      gloo::allreduce(options);
    });
    if (op == ReduceOp::kAvg) divideElements(data, count, type, worldSize_);
  }

  void broadcast(void* data, std::size_t count, DataType type, int root) override {
    requireHostMemory("broadcast", data);
    guarded("broadcast", Clock::now(), [&] {
      gloo::BroadcastOptions options(context_);
      setOutput(options, data, count, type);
      options.setRoot(root);
      options.setTag(nextTag());
      options.setTimeout(timeout_);
      gloo::broadcast(options);
    });
  }

  void allGather(const void* input, void* output, std::size_t count, DataType type) override {
    requireHostMemory("all_gather", input);
    requireHostMemory("all_gather", output);
    guarded("all_gather", Clock::now(), [&] {
      gloo::AllgatherOptions options(context_);
      const std::size_t bytes = count * sizeOf(type);
      // Without an input buffer gloo works in place: this rank's block of output is its input.
      if (input != static_cast<const char*>(output) + static_cast<std::size_t>(rank_) * bytes) {
        setInput(options, input, count, type);
      }
      setOutput(options, output, count * static_cast<std::size_t>(worldSize_), type);
      options.setTag(nextTag());
      options.setTimeout(timeout_);
      gloo::allgather(options);
    });
  }

  void barrier() override {
    guarded("barrier", Clock::now(), [&] {
      gloo::BarrierOptions options(context_);
      options.setTag(nextTag());
      options.setTimeout(timeout_);
      gloo::barrier(options);
    });
  }

  void shutdown() override {
    context_.reset();
    device_.reset();
    bootstrap_.store.reset();
    if (bootstrap_.server) bootstrap_.server->stop();
  }

 private:
  std::uint32_t nextTag() { return tag_++; }

  // Gloo reads and writes buffers from the CPU: a GPU pointer would crash the process.
  void requireHostMemory(const char* what, const void* pointer) const {
    if (!isDeviceMemory(pointer)) return;
    throw RuntimeError(RuntimeError::Kind::kInvalidArgument,
                       fmt::format("gloo {} on rank {}: {} is CUDA device memory, which the Gloo "
                                   "backend cannot use: pass a host buffer, or use the NCCL "
                                   "backend (DDPRUN_BACKEND=nccl)",
                                   what, rank_, pointer));
  }

  // Runs one gloo call; its failures become RuntimeError naming the operation, the rank and how
  // long it waited.
  template <typename Body>
  void guarded(const char* what, Clock::time_point start, Body&& body) {
    auto fail = [&](RuntimeError::Kind kind, const std::string& cause) -> RuntimeError {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      return RuntimeError(kind, fmt::format("gloo {} failed on rank {} of {} after {} ms: {}", what,
                                            rank_, worldSize_, waited, cause));
    };
    try {
      body();
    } catch (const rendezvous::StoreTimeoutError& error) {
      throw fail(RuntimeError::Kind::kTimeout,
                 fmt::format("{} (not every rank reached the bootstrap in time)", error.what()));
    } catch (const rendezvous::StoreError& error) {
      throw fail(RuntimeError::Kind::kPeerFailure, fmt::format("store: {}", error.what()));
    } catch (const gloo::IoException& error) {
      const std::string cause = oneLine(error.what());
      const bool timedOut = cause.find("Timed out") != std::string::npos ||
                            cause.find("timed out") != std::string::npos;
      throw fail(timedOut ? RuntimeError::Kind::kTimeout : RuntimeError::Kind::kPeerFailure,
                 cause + (timedOut ? " (a peer hung: raise DDPRUN_TIMEOUT if it was only slow)"
                                   : " (a peer died or was cut off)"));
    } catch (const gloo::Exception& error) {
      throw fail(RuntimeError::Kind::kPeerFailure, oneLine(error.what()));
    } catch (const gloo::EnforceNotMet& error) {
      throw fail(RuntimeError::Kind::kPeerFailure, oneLine(error.what()));
    }
  }

  static std::string oneLine(std::string text) {
    for (char& c : text) {
      if (c == '\n') c = ' ';
    }
    return text;
  }

  int rank_;
  int worldSize_;
  std::chrono::milliseconds timeout_;
  Bootstrap bootstrap_;  // kept: rank 0 may host the store other ranks still read from
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::uint32_t tag_ = 0;
};

}  // namespace

std::unique_ptr<Collectives> makeGlooCollectives(const RuntimeOptions& options,
                                                 Bootstrap bootstrap) {
  return std::make_unique<GlooCollectives>(options, std::move(bootstrap));
}

}  // namespace ddprun::runtime::detail
