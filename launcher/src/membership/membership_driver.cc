#include "membership/membership_driver.h"

#include <fmt/format.h>
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

// How long a rejoin waits between attempts to reach the store (each connection attempt inside
// Membership::open already lasts up to a second).
constexpr auto kRejoinPause = std::chrono::milliseconds(500);

StoreLoss lossOf(const StoreLostError& lost) { return StoreLoss{lost.closedByHost(), lost.what()}; }

}  // namespace

MembershipDriver::MembershipDriver(const RendezvousConfig& config, StoreBackend& backend,
                                   NodeInfo self, EventLoop& loop)
    : config_(config),
      backend_(backend),
      self_(std::move(self)),
      loop_(loop),
      membership_(fresh()) {
  control_.start([this] { controlLoop(); });
}

std::shared_ptr<Membership> MembershipDriver::fresh() {
  return std::make_shared<Membership>(config_, backend_, self_,
                                      [&loop = loop_] { return loop.now(); });
}

std::shared_ptr<Membership> MembershipDriver::current() const {
  std::lock_guard lock(membershipMutex_);
  return membership_;
}

MembershipDriver::~MembershipDriver() { stopThreads(); }

void MembershipDriver::runOnControl(Call call, std::function<void(std::exception_ptr)> onError) {
  {
    auto lock = control_.lock();
    queue_.emplace_back(std::move(call), std::move(onError));
  }
  control_.wake();
}

void MembershipDriver::controlLoop() {
  for (;;) {
    std::pair<Call, std::function<void(std::exception_ptr)>> next;
    {
      auto lock = control_.lock();
      control_.waitUntil(lock, [this] { return !queue_.empty(); });
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
        const auto membership = current();
        Round formed;
        if (!opened_) {
          // Opening and the first join share one budget: join_timeout in all.
          const JoinBudget budget = membership->freshBudget();
          membership->open(budget);
          opened_ = true;
          nodeId_.store(membership->self().id);
          formed = membership->join(round, budget);
        } else {
          formed = membership->join(round);
        }
        loop_.post([this, formed = std::move(formed)]() mutable {
          events_->onRoundFormed(std::move(formed));
        });
      },
      [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

void MembershipDriver::rejoin() {
  runOnControl(
      [this] {
        // One budget for every attempt: reconnecting and joining together take at most
        // join_timeout.
        const JoinBudget budget(config_.settings.joinTimeout, loop_.now());
        std::string lastProblem;
        for (;;) {
          const auto outcome = rejoinOnce(budget, lastProblem);
          if (outcome != Attempt::kFailed) return;
          if (budget.left(loop_.now()).count() == 0) {
            const double waited =
                std::chrono::duration<double>(loop_.now() - budget.start()).count();
            throw MembershipError(fmt::format(
                "could not rejoin the job within join_timeout ({:.0f} s): the rendezvous store at "
                "{} "
                "stayed out of reach ({}); this node's workers were stopped {:.1f} s ago",
                budget.limit().count() / 1000.0, backend_.address(), lastProblem, waited));
          }
          spdlog::debug("rejoining: {}; trying again", lastProblem);
          auto lock = control_.lock();
          if (!control_.sleepFor(lock, kRejoinPause)) return;
        }
      },
      [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

void MembershipDriver::standAside() {
  runOnControl(
      [this] {
        std::shared_ptr<Membership> old;
        {
          auto lock = control_.lock();
          if (control_.stopping()) return;
          std::lock_guard swap(membershipMutex_);
          old = std::exchange(membership_, fresh());
        }
        if (opened_) old->abandon();
        opened_ = false;
      },
      [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

MembershipDriver::Attempt MembershipDriver::rejoinOnce(const JoinBudget& budget,
                                                       std::string& lastProblem) {
  // The old member leaves as a killed agent would, and a new one (a new node id, no holds, no
  // round) takes its place: nothing of the old one can write to a round again.
  std::shared_ptr<Membership> next = fresh();
  std::shared_ptr<Membership> old;
  {
    // Under control_'s lock: stopThreads() asks the stop before it cancels the membership in
    // use, so a new one is either never made or cancelled with it.
    auto lock = control_.lock();
    if (control_.stopping()) return Attempt::kStopping;
    std::lock_guard swap(membershipMutex_);
    old = std::exchange(membership_, next);
  }
  old->abandon();
  opened_ = false;
  const auto left = budget.left(loop_.now());
  try {
    if (left.count() <= 0) throw StoreLostError(lastProblem);
    next->open(budget, left);
    opened_ = true;
    nodeId_.store(next->self().id);
    Round formed = next->join(-1, budget);
    loop_.post([this, formed = std::move(formed)]() mutable {
      events_->onRoundFormed(std::move(formed));
    });
    return Attempt::kJoined;
  } catch (const BadInputError& error) {
    // Nothing answered within the time left (EndpointError), or something else did.
    lastProblem = error.what();
  } catch (const StoreLostError& error) {
    lastProblem = error.what();
  } catch (const rendezvous::StoreError& error) {
    lastProblem = error.what();
  }
  return Attempt::kFailed;
}

void MembershipDriver::publishWorkerStore(int round, std::string host, std::uint16_t port) {
  runOnControl([this, round, host = std::move(host),
                port] { current()->publishWorkerStore(round, host, port); },
               [this](std::exception_ptr error) { events_->onRendezvousFailed(failureOf(error)); });
}

void MembershipDriver::announce(int round, StopReason stop) {
  // A lost store is the watch's to report.
  runOnControl([this, round, stop = std::move(stop)] { current()->announce(round, stop); }, {});
}

void MembershipDriver::markDone(int round, int members) {
  runOnControl([this, round, members] { current()->markDone(round, members); }, {});
}

void MembershipDriver::watch(int round) {
  if (watch_.joinable()) watch_.join();  // the previous round's: it has returned
  watch_ = std::thread([this, round, membership = current()] {
    try {
      StopReason stop = membership->waitForStop(round);
      loop_.post([this, round, stop = std::move(stop)]() mutable {
        events_->onStop(round, std::move(stop));
      });
    } catch (const MembershipCancelled&) {
    } catch (const StoreLostError& lost) {
      loop_.post([this, loss = lossOf(lost)] { events_->onStoreLost(loss); });
    } catch (const rendezvous::StoreError& error) {
      loop_.post([this, loss = StoreLoss{false, error.what()}] { events_->onStoreLost(loss); });
    } catch (const std::exception& error) {
      loop_.post([this, failure = failureOf(std::current_exception())] {
        events_->onRendezvousFailed(failure);
      });
    }
  });
}

void MembershipDriver::stopThreads() {
  control_.requestStop();
  current()->cancel();
  control_.stop();
  if (watch_.joinable()) watch_.join();
}

void MembershipDriver::leave(bool hostsStore, bool storeEndsAlone,
                             std::optional<std::chrono::milliseconds> patience) {
  stopThreads();
  if (storeEndsAlone) {
    current()->stopHeartbeat();
  } else {
    current()->close(hostsStore, patience);
  }
}

}  // namespace ddprun::launcher
