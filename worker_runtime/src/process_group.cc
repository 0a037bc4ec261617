// ProcessGroup: argument checks, backend choice, and the broken-after-failure rule; the backends
// do the communication.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "collectives.h"
#include "ddprun/rendezvous/errors.h"

namespace ddprun::runtime {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw RuntimeError(RuntimeError::Kind::kInvalidArgument, message);
}

void validate(const RuntimeOptions& options) {
  if (options.worldSize < 1) {
    invalid(fmt::format("world size {} must be at least 1", options.worldSize));
  }
  if (options.rank < 0 || options.rank >= options.worldSize) {
    invalid(
        fmt::format("rank {} is not in [0, {}): give each process a distinct rank below the "
                    "world size",
                    options.rank, options.worldSize));
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

struct Choice {
  BackendKind backend;
  std::string reason;  // for the message when ranks disagree
};

Choice chooseBackend(const RuntimeOptions& options) {
  if (options.backend == BackendKind::kGloo) return {BackendKind::kGloo, "asked for"};
  const std::string whyNot = detail::ncclUnusableReason();
  if (options.backend == BackendKind::kNccl) {
    if (!whyNot.empty()) {
      throw RuntimeError(
          RuntimeError::Kind::kUnavailable,
          fmt::format("the NCCL backend was asked for but {}: run on a GPU host with "
                      "a build that has NCCL, or use DDPRUN_BACKEND=gloo",
                      whyNot));
    }
    return {BackendKind::kNccl, "asked for"};
  }
  if (whyNot.empty()) return {BackendKind::kNccl, "auto: a GPU is visible"};
  return {BackendKind::kGloo, "auto: " + whyNot};
}

// Every rank must run the same backend, but `auto` decides per host (a node without a GPU picks
// Gloo), and a rank waiting for peers on another backend would only time out. So each rank votes
// for its backend before the backend bootstraps: after all have voted, a rank whose count is not
// the world size knows at once, and says which way the others went.
void agreeOnBackend(const RuntimeOptions& options, const Choice& choice,
                    detail::Bootstrap& bootstrap) {
  if (options.worldSize == 1) return;
  const std::string mine(toString(choice.backend));
  std::int64_t same = 0;
  try {
    bootstrap.store->add("backend/" + mine, 1);
    bootstrap.store->barrier("backend/voted", options.worldSize, options.timeout);
    same = bootstrap.store->add("backend/" + mine, 0);
  } catch (const rendezvous::StoreTimeoutError&) {
    throw RuntimeError(
        RuntimeError::Kind::kTimeout,
        fmt::format("rank {} of {}: not every rank reached the bootstrap under {} within {} ms: a "
                    "rank was not started, failed before it, or uses another MASTER_ADDR/"
                    "MASTER_PORT or run id",
                    options.rank, options.worldSize, bootstrap.keyPrefix, options.timeout.count()));
  } catch (const rendezvous::StoreError& error) {
    throw RuntimeError(RuntimeError::Kind::kPeerFailure,
                       fmt::format("rank {}: the bootstrap through the store failed: {}",
                                   options.rank, error.what()));
  }
  if (same == options.worldSize) return;
  // Every rank throws now. Where rank 0 hosts the store, it waits (briefly) until the others have
  // read the votes, so that they report this rather than a closed connection.
  try {
    if (bootstrap.server) {
      std::vector<std::string> seen;
      for (int rank = 1; rank < options.worldSize; ++rank) {
        seen.push_back(fmt::format("backend/seen/{}", rank));
      }
      bootstrap.store->wait(seen, std::min(options.timeout, std::chrono::milliseconds(5000)));
    } else if (options.hostStore) {
      bootstrap.store->set(fmt::format("backend/seen/{}", options.rank), "");
    }
  } catch (const rendezvous::StoreError&) {
    // The message below is what matters.
  }
  const BackendKind other =
      choice.backend == BackendKind::kNccl ? BackendKind::kGloo : BackendKind::kNccl;
  throw RuntimeError(
      RuntimeError::Kind::kUnavailable,
      fmt::format("the ranks do not agree on the backend: rank {} uses {} ({}) but {} of the {} "
                  "ranks use {}: set DDPRUN_BACKEND to the same value on every node (gloo works "
                  "everywhere; nccl needs a GPU for every rank)",
                  options.rank, mine, choice.reason, options.worldSize - same, options.worldSize,
                  toString(other)));
}

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::init(const RuntimeOptions& options) {
  validate(options);
  const Choice choice = chooseBackend(options);
  auto bootstrap = detail::Bootstrap::connect(options);
  agreeOnBackend(options, choice, bootstrap);
  auto impl = choice.backend == BackendKind::kNccl
                  ? detail::makeNcclCollectives(options, std::move(bootstrap))
                  : detail::makeGlooCollectives(options, std::move(bootstrap));
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

ProcessGroup::ProcessGroup(std::unique_ptr<detail::Collectives> collectives)
    : collectives_(std::move(collectives)) {}

ProcessGroup::~ProcessGroup() { shutdown(); }

int ProcessGroup::rank() const { return collectives_->rank(); }
int ProcessGroup::worldSize() const { return collectives_->worldSize(); }
BackendKind ProcessGroup::backend() const { return collectives_->kind(); }
int ProcessGroup::device() const { return collectives_->device(); }

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
    reportProgress();  // a collective that completed is progress for every rank in it
  } catch (const RuntimeError& error) {
    if (error.kind() != RuntimeError::Kind::kInvalidArgument) broken = true;
    throw;
  }
}

void ProcessGroup::allReduce(void* data, std::size_t count, DataType type, ReduceOp op) {
  checkUsable();
  if (count == 0) return;
  if (data == nullptr) invalid("allReduce: data is null");
  collective(broken_, [&] { collectives_->allReduce(data, count, type, op); });
}

void ProcessGroup::broadcast(void* data, std::size_t count, DataType type, int root) {
  checkUsable();
  if (root < 0 || root >= worldSize()) {
    invalid(fmt::format("broadcast: root {} is not a rank in [0, {})", root, worldSize()));
  }
  if (count == 0) return;
  if (data == nullptr) invalid("broadcast: data is null");
  collective(broken_, [&] { collectives_->broadcast(data, count, type, root); });
}

void ProcessGroup::allGather(const void* input, void* output, std::size_t count, DataType type) {
  checkUsable();
  if (count == 0) return;
  if (input == nullptr || output == nullptr) invalid("allGather: input or output is null");
  collective(broken_, [&] { collectives_->allGather(input, output, count, type); });
}

void ProcessGroup::barrier() {
  checkUsable();
  collective(broken_, [&] { collectives_->barrier(); });
}

void ProcessGroup::shutdown() {
  if (shutDown_) return;
  shutDown_ = true;
  collectives_->shutdown();
}

}  // namespace ddprun::runtime
