#include "membership/membership_driver.h"

#include <spdlog/spdlog.h>

namespace ddprun::launcher {
namespace {

// A join that failed for good, as the machine sees it.
RendezvousFailure failureOf(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const BadInputError& bad) {
    return RendezvousFailure{RendezvousFailure::Kind::kBadInput, bad.what()};
  } catch (const JobOverError& over) {
    return RendezvousFailure{RendezvousFailure::Kind::kJobOver, over.what()};
  } catch (const std::exception& other) {
    return RendezvousFailure{RendezvousFailure::Kind::kFailed, other.what()};
  } catch (...) {
    return RendezvousFailure{RendezvousFailure::Kind::kFailed, "unknown error"};
  }
}

bool cancelled(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const MembershipCancelled&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

MembershipDriver::MembershipDriver(const RendezvousConfig& config, StoreBackend& backend,
                                   NodeInfo self, EventLoop& loop)
    : membership_(config, backend, std::move(self), [&loop] { return loop.now(); }),
      loop_(loop),
      control_([this] { controlLoop(); }) {}

MembershipDriver::~MembershipDriver() { stopThreads(); }

void MembershipDriver::runOnControl(Call call, std::function<void(std::exception_ptr)> onError) {
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(call), std::move(onError));
  }
  wake_.notify_all();
}

void MembershipDriver::controlLoop() {
  for (;;) {
    std::pair<Call, std::function<void(std::exception_ptr)>> next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Calls queued before stopping still run (a leaving agent's node_left notice); a blocking
      // one gives up at once, since the membership is cancelled first.
      if (queue_.empty()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      next.first();
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      if (!cancelled(error) && next.second) {
        loop_.post([onError = std::move(next.second), error] { onError(error); });
      }
    }
  }
}

void MembershipDriver::join(int round) {
  runOnControl(
      [this, round] {
        if (!opened_) {
          membership_.open();
          opened_ = true;
        }
        Round formed = membership_.join(round);
        loop_.post([this, formed = std::move(formed)]() mutable { events_->onRoundFormed(std::move(formed)); });
      },
      [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

void MembershipDriver::publishWorkerStore(int round, std::string host, std::uint16_t port) {
  runOnControl([this, round, host = std::move(host), port] { membership_.publishWorkerStore(round, host, port); },
               [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

void MembershipDriver::announce(int round, StopReason stop) {
  // A lost store is the watch's to report.
  runOnControl([this, round, stop = std::move(stop)] { membership_.announce(round, stop); }, {});
}

void MembershipDriver::markDone(int round, int members) {
  runOnControl([this, round, members] { membership_.markDone(round, members); }, {});
}

void MembershipDriver::watch(int round) {
  if (watch_.joinable()) watch_.join();  // the previous round's: it has returned
  watch_ = std::thread([this, round] {
    try {
      StopReason stop = membership_.waitForStop(round);
      loop_.post([this, round, stop = std::move(stop)]() mutable { events_->onStop(round, std::move(stop)); });
    } catch (const MembershipCancelled&) {
    } catch (const StoreLostError& lost) {
      loop_.post([this, reason = std::string(lost.what())] { events_->onStoreLost(reason); });
    } catch (const rendezvous::StoreError& error) {
      loop_.post([this, reason = std::string(error.what())] { events_->onStoreLost(reason); });
    } catch (const std::exception& error) {
      loop_.post([this, failure = failureOf(std::current_exception())] { events_->onRendezvousFailed(failure); });
    }
  });
}

void MembershipDriver::stopThreads() {
  membership_.cancel();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (control_.joinable()) control_.join();
  if (watch_.joinable()) watch_.join();
}

void MembershipDriver::close(bool hostsStore, std::optional<std::chrono::milliseconds> patience) {
  stopThreads();
  membership_.close(hostsStore, patience);
}

}  // namespace ddprun::launcher
