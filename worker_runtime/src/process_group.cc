// ProcessGroup: argument checks, backend choice, and the broken-after-failure rule; the backends
// do the communication.
#include <fmt/format.h>

#include "backend.h"
#include "bootstrap.h"

namespace ddprun {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw RuntimeError(RuntimeError::Kind::kInvalidArgument, message);
}

void validate(const RuntimeOptions& options) {
  if (options.worldSize < 1) {
    invalid(fmt::format("world size {} must be at least 1", options.worldSize));
  }
  if (options.rank < 0 || options.rank >= options.worldSize) {
    invalid(fmt::format("rank {} is not in [0, {}): give each process a distinct rank below the "
                        "world size", options.rank, options.worldSize));
  }
  if (options.masterPort < 1 || options.masterPort > 65535) {
    invalid(fmt::format("master port {} is not in 1..65535: set MASTER_PORT (ddprun sets it)",
                        options.masterPort));
  }
  if (options.timeout.count() <= 0) invalid("the timeout must be positive");
  if (options.runId.empty() || options.groupName.empty()) {
    invalid("the run id and the group name must not be empty");
  }
}

Backend chooseBackend(const RuntimeOptions& options) {
  if (options.backend == Backend::kGloo) return Backend::kGloo;
  const std::string whyNot = detail::ncclUnusableReason();
  if (options.backend == Backend::kNccl) {
    if (!whyNot.empty()) {
      throw RuntimeError(RuntimeError::Kind::kUnavailable,
                         fmt::format("the NCCL backend was asked for but {}: run on a GPU host with "
                                     "a build that has NCCL, or use DDPRUN_BACKEND=gloo",
                                     whyNot));
    }
    return Backend::kNccl;
  }
  return whyNot.empty() ? Backend::kNccl : Backend::kGloo;
}

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::init(const RuntimeOptions& options) {
  validate(options);
  const Backend backend = chooseBackend(options);
  auto bootstrap = detail::Bootstrap::connect(options);
  auto impl = backend == Backend::kNccl ? detail::makeNcclBackend(options, std::move(bootstrap))
                                        : detail::makeGlooBackend(options, std::move(bootstrap));
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

ProcessGroup::ProcessGroup(std::unique_ptr<detail::Backend> backend) : backend_(std::move(backend)) {}

ProcessGroup::~ProcessGroup() { shutdown(); }

int ProcessGroup::rank() const { return backend_->rank(); }
int ProcessGroup::worldSize() const { return backend_->worldSize(); }
Backend ProcessGroup::backend() const { return backend_->kind(); }
int ProcessGroup::device() const { return backend_->device(); }

void ProcessGroup::checkUsable() const {
  if (shutDown_) {
    invalid("the process group was shut down: create a new one with ProcessGroup::init()");
  }
  if (broken_) {
    throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                       "the process group is broken by an earlier failure: exit non-zero so the "
                       "ddprun agent restarts the group");
  }
}

// Runs one collective; any failure other than a bad argument breaks the group, since the ranks
// can no longer agree on which collective comes next.
template <typename Body>
static void collective(bool& broken, Body&& body) {
  try {
    body();
  } catch (const RuntimeError& error) {
    if (error.kind() != RuntimeError::Kind::kInvalidArgument) broken = true;
    throw;
  }
}

void ProcessGroup::allReduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  checkUsable();
  if (count == 0) return;
  if (data == nullptr) invalid("allReduce: data is null");
  collective(broken_, [&] { backend_->allReduce(data, count, type, op); });
}

void ProcessGroup::broadcast(void* data, std::size_t count, DataType type, int root) {
  checkUsable();
  if (root < 0 || root >= worldSize()) {
    invalid(fmt::format("broadcast: root {} is not a rank in [0, {})", root, worldSize()));
  }
  if (count == 0) return;
  if (data == nullptr) invalid("broadcast: data is null");
  collective(broken_, [&] { backend_->broadcast(data, count, type, root); });
}

void ProcessGroup::allGather(const void* input, void* output, std::size_t count, DataType type) {
  checkUsable();
  if (count == 0) return;
  if (input == nullptr || output == nullptr) invalid("allGather: input or output is null");
  collective(broken_, [&] { backend_->allGather(input, output, count, type); });
}

void ProcessGroup::barrier() {
  checkUsable();
  collective(broken_, [&] { backend_->barrier(); });
}

void ProcessGroup::shutdown() {
  if (shutDown_) return;
  shutDown_ = true;
  backend_->shutdown();
}

}  // namespace ddprun
