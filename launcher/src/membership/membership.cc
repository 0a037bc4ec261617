#include "membership/membership.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/shown_text.h"

namespace ddprun::launcher {

using rendezvous::StoreTimeoutError;
using namespace std::chrono_literals;

namespace {

// How long each attempt to reach the store lasts while it may still be coming up, so that
// cancel() is noticed.
constexpr auto kConnectAttempt = 1s;

long wholeSeconds(std::chrono::steady_clock::duration duration) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(duration).count());
}

}  // namespace

Membership::Membership(const RendezvousConfig& config, StoreBackend& backend, NodeInfo self,
                       Now now)
    : config_(config),
      backend_(backend),
      self_(std::move(self)),
      now_(std::move(now)),
      keys_(config.runId),
      liveness_(keys_, settings_, now_) {
  if (config_.backend == RdzvBackend::kStatic && backend_.staticFacet() == nullptr) {
    throw std::invalid_argument(
        "Membership: the static rendezvous needs a store its workers share");
  }
}

Membership::~Membership() { close(/*hostsStore=*/false); }

void Membership::throwIfStopped() const {
  if (cancelled_) throw MembershipCancelled();
  liveness_.throwIfLost();
}

void Membership::open(const JoinBudget& budget,
                      std::optional<std::chrono::milliseconds> patienceGiven) {
  // The first connection waits for the store to come up (the node hosting it may start later, as
  // with torchrun): up to read_timeout, or with the static backend the whole join timeout (its
  // `timeout`, as torchrun's TCPStore client waits for the master); never past the join budget.
  // The others follow at once.
  const auto patience = std::min(
      patienceGiven.value_or(config_.backend == RdzvBackend::kStatic ? settings_.joinTimeout
                                                                     : settings_.readTimeout),
      budget.left(now_()));
  connectControl(budget, patience);
  // A node whose address toward the store was unknown at start (the name did not resolve then).
  if (self_.address.empty()) self_.address = backend_.addressTowardStore();
  // The watch and heartbeat connections must notice a silent store quickly (a cut network
  // sends nothing): their calls time out as fast as a hold lapses, or after heartbeat_timeout.
  // Reconnecting after a network blip: the heartbeat's is worth trying for as long as the node
  // counts as alive; the watch's in short attempts, so that it notices the heartbeat's verdict.
  const auto quick =
      settings_.heartbeatTimeout.value_or(std::max(settings_.holdTimeToLive(), 1000ms));
  watch_ = connectMore(quick, kConnectAttempt, patience);
  liveness_.connect(connectMore(quick, settings_.holdTimeToLive(), patience), quick);
  claimStore();
  if (liveness_.store().holdLapse() == rendezvous::HoldLapse::kKeyDeletedOnly) {
    liveness_.reportLapsesThrough(connectMore(quick, kConnectAttempt, patience));
  }
  // A ticket, not add(): on etcd a guarded increment that N starting agents race for costs a raft
  // proposal per retry (Store::takeTicket).
  self_.id = control().takeTicket(keys_.nextNodeId());
  control().set(keys_.node(self_.id), toJsonText(self_));
  liveness_.start(self_);
}

void Membership::connectControl(const JoinBudget& budget, std::chrono::milliseconds patience) {
  // A store host name that does not resolve yet (a Kubernetes pod's service name appears some
  // time after the pod) is waited for up to the join budget, and the store behind it then gets
  // its patience again from the moment the name resolved.
  const auto start = now_();
  // The name is waited for until the join budget is spent, or for `patience` when that is longer.
  const bool budgetBounds = budget.left(start) >= patience;
  const TimePoint nameStart = budgetBounds ? budget.start() : start;
  const std::chrono::milliseconds nameLimit = budgetBounds ? budget.limit() : patience;
  const char* patienceName =
      config_.backend == RdzvBackend::kStatic ? "the static rendezvous timeout" : "read_timeout";
  std::optional<TimePoint> resolvedAt;  // the first attempt that got past name resolution
  WaitLines lines(start);
  for (;;) {
    try {
      control_ = backend_.connect(settings_.readTimeout, kConnectAttempt);
      return;
    } catch (const rendezvous::StoreAuthError& error) {
      throw EndpointError(error.what());
    } catch (const rendezvous::StoreHandshakeError& error) {
      // Something answers but is not a ddprun store: no point in waiting for it.
      throw EndpointError(fmt::format("{}; check --rdzv-endpoint", error.what()));
    } catch (const rendezvous::StoreUnresolvedError& error) {
      if (cancelled_) throw MembershipCancelled();
      const auto waited = now_() - nameStart;
      if (waited > nameLimit) {
        throw EndpointError(fmt::format(
            "the rendezvous store's host name in {} did not resolve within {} ({} s): {}; check "
            "the name in --rdzv-endpoint (or --master-addr) and this host's DNS",
            backend_.address(), budgetBounds ? "the join timeout" : patienceName,
            nameLimit.count() / 1000.0, error.what()));
      }
      if (lines.due(now_(), "unresolved")) {
        spdlog::warn("waiting for the rendezvous store at {}: name not resolved yet ({} s of {} s)",
                     backend_.address(), wholeSeconds(waited), wholeSeconds(nameLimit));
      }
    } catch (const rendezvous::StoreConnectionError& error) {
      if (cancelled_) throw MembershipCancelled();
      if (!resolvedAt) resolvedAt = now_();
      const auto waited = now_() - *resolvedAt;
      if (waited > patience) {
        throw EndpointError(fmt::format(
            "cannot reach the rendezvous store at {} within {} ({} s): {}; {}", backend_.address(),
            patienceName, patience.count() / 1000.0, error.what(), backend_.unreachableFix()));
      }
      if (lines.due(now_(), "no answer")) {
        spdlog::warn("waiting for the rendezvous store at {}: no answer yet ({} s of {} s)",
                     backend_.address(), wholeSeconds(waited), wholeSeconds(patience));
      }
    }
  }
}

std::unique_ptr<rendezvous::HoldingStore> Membership::connectMore(
    std::chrono::milliseconds callTimeout, std::chrono::milliseconds attempt,
    std::chrono::milliseconds patience) {
  // A store that thousands of agents open in the same second may take longer than one attempt to
  // accept one more connection (its accept queue full, a SYN resent after 1 s; docs/benchmarks.md,
  // "Scale"): tried again within the same patience, each attempt short enough for cancel().
  const auto giveUp = now_() + patience;
  for (int tries = 1;; ++tries) {
    try {
      return backend_.connect(callTimeout, attempt);
    } catch (const rendezvous::StoreConnectionError&) {
      if (cancelled_) throw MembershipCancelled();
      // Bounded by the count too: a test's manual clock may stand still.
      if (now_() >= giveUp || tries * attempt >= patience) throw;
    }
  }
}

void Membership::claimStore() {
  // A store that is this job's alone is claimed by the run, so that an agent of another run id
  // is told at once instead of waiting beside it; a shared store (an etcd) serves every run id
  // side by side, each under its own prefix, and is claimed by none.
  if (backend_.tenancy() != StoreTenancy::kOneJob) return;
  const std::string active = liveness_.store().hold(kActiveRunKey, config_.runId, 0ms, "", "");
  if (active != config_.runId) {
    throw MembershipError(fmt::format(
        "the rendezvous store at {} belongs to run '{}', and this agent's run is '{}': agents "
        "of different jobs never share a rendezvous; give this job its own --rdzv-endpoint, or "
        "the same --rdzv-id as the running job to join it",
        backend_.address(), shown(active), config_.runId));
  }
  claimsStore_ = true;
}

void Membership::abandon() {
  cancel();
  // Closed without a release: to the store this node vanished, as a killed agent does, and it
  // writes the node_lost notice into the round the hold names unless that round already stopped.
  // The watch connection may still be in a call on the watch thread: it goes with the object.
  liveness_.abandon();
  control_.reset();
}

int Membership::currentRound() {
  // The first agent of the run creates the counter at round 0.
  return roundFrom(control().compareSet(keys_.currentRound(), "", "0"));
}

Round Membership::join(int fromRound, const JoinBudget& given) {
  JoinBudget budget = given;
  int round = fromRound < 0 ? currentRound() : fromRound;
  for (;;) {
    throwIfStopped();
    // Never join a round the job has left (a late agent, a node back from a partition): the
    // fencing token of joins.
    if (const auto current = storeRound(control()); current && *current > round) round = *current;
    switch (joinEntry(closed(round), config_.maxNodes)) {
      case JoinEntry::kJoin: {
        const auto slot = takeSlot(round);
        if (!slot) continue;  // the job moved on meanwhile
        if (auto joined = waitForClose(round, *slot, budget)) return *joined;
        continue;  // closed without us: we are a newcomer to the running round now
      }
      case JoinEntry::kWaitForPlace:
        // A spare waits as long as the job runs; its join timeout counts from a place opening.
        waitForRoundToStop(round);
        budget = freshBudget();
        ++round;
        continue;
      case JoinEntry::kJoinNext: {
        // The job runs round `round` without us, below MAX: take a place in the next round first,
        // then tell the members to re-form with us.
        const auto slot = takeSlot(round + 1);
        if (!slot) continue;
        // Our own slot moved the job's current round past `round`, which is still running: this
        // notice is the step that stops it, so it skips the token check (it is create-if-absent:
        // a round that stopped meanwhile keeps its own record).
        writeStop(round, StopReason::nodeJoined(self_.id, self_.hostname));
        ++round;
        if (auto joined = waitForClose(round, *slot, budget)) return *joined;
        continue;
      }
    }
  }
}

std::optional<int> Membership::takeSlot(int round) {
  if (!mayWriteRound(control(), round, "a join")) return std::nullopt;
  // The join counter is a ticket key (Store::takeTicket): one write per joiner on every backend.
  const int slot = static_cast<int>(control().takeTicket(keys_.joined(round)));
  control().set(keys_.member(round, slot), std::to_string(self_.id));
  // Keep the job's current round up to date for agents that start later.
  for (std::string current = std::to_string(round - 1); round > 0;) {
    const std::string seen =
        control().compareSet(keys_.currentRound(), current, std::to_string(round));
    // c10d answers `expected` itself only for a missing key (a swap answers the new value, a
    // mismatch the one stored): create it then, or this would ask the same question forever.
    if (seen == current && !current.empty()) {
      current.clear();
      continue;
    }
    if (roundFrom(seen) >= round) break;
    current = seen;
  }
  return slot;
}

std::optional<Round> Membership::waitForClose(int round, int slot, const JoinBudget& budget) {
  JoinerPolicy policy(JoinRules{config_.minNodes, config_.maxNodes, settings_.lastCallTimeout},
                      slot, now_());
  WaitLines lines(now_());
  int reportedJoined = -1;
  bool readClose = true;  // false after a wait that timed out: nothing was written to the close key
  for (;;) {
    if (readClose) {
      if (const auto record = closed(round)) return takePlace(round, *record);
    }
    readClose = closePass(round, policy, budget, lines, reportedJoined);
  }
}

bool Membership::closePass(int round, JoinerPolicy& policy, const JoinBudget& budget,
                           WaitLines& lines, int& reportedJoined) {
  throwIfStopped();
  const int counted = policy.readsCounter(now_())
                          ? static_cast<int>(control().ticketCount(keys_.joined(round)))
                          : policy.counted();
  std::optional<std::vector<std::int64_t>> live;
  if (policy.readsList(counted, now_())) live = liveJoiners(round);
  policy.listed(live ? std::optional<int>(static_cast<int>(live->size())) : std::nullopt);
  if (live && maybeClose(round, *live, policy.lastCall())) return true;
  const int joined =
      policy.joined(live ? std::optional<int>(static_cast<int>(live->size())) : std::nullopt);
  // After losses, the nodes that can still come back may be fewer than MIN: then only new nodes
  // can save the job, and they get last_call_timeout, not the whole join_timeout. Decided at each
  // list read and kept between them.
  if (live) {
    const auto away =
        joined < config_.minNodes ? previousMembersStillAway(round, *live) : std::nullopt;
    policy.remaining(away ? std::optional<int>(joined + *away) : std::nullopt);
  }
  checkShortage(policy, policy.remaining());
  if (budget.spent(now_())) {
    throw MembershipError(fmt::format(
        "rendezvous round {} did not complete within join_timeout ({} s): {} of at least {} "
        "nodes joined; start the missing nodes or lower --nnodes",
        round, budget.limit().count() / 1000.0, joined, config_.minNodes));
  }
  sayJoinProgress(round, policy, live, joined, budget, lines, reportedJoined);
  try {
    control().wait({keys_.closed(round)}, policy.pace());
  } catch (const StoreTimeoutError&) {
    return false;
  }
  return true;
}

void Membership::checkShortage(JoinerPolicy& policy, std::optional<int> remaining) {
  switch (policy.shortage(now_())) {
    case JoinerPolicy::Shortage::kNone:
    case JoinerPolicy::Shortage::kWaits:
      return;
    case JoinerPolicy::Shortage::kBegins:
      spdlog::warn(
          "only {} node(s) remain of the at least {} this job needs; waiting up to {} s "
          "(last_call_timeout) for others to join",
          remaining.value_or(0), config_.minNodes, settings_.lastCallTimeout.count() / 1000.0);
      return;
    case JoinerPolicy::Shortage::kOver:
      throw MembershipError(fmt::format(
          "only {} node(s) remain of the at least {} this job needs (--nnodes {}:{}): the others "
          "were lost and none joined within last_call_timeout ({} s); restart the lost nodes or "
          "lower the minimum of --nnodes",
          remaining.value_or(0), config_.minNodes, config_.minNodes, config_.maxNodes,
          settings_.lastCallTimeout.count() / 1000.0));
  }
}

void Membership::sayJoinProgress(int round, const JoinerPolicy& policy,
                                 const std::optional<std::vector<std::int64_t>>& live, int joined,
                                 const JoinBudget& budget, WaitLines& lines, int& reportedJoined) {
  if (joined != reportedJoined) {  // the log's record of each change (LOGLEVEL=INFO)
    spdlog::info("rendezvous round {} of run '{}': {} node(s) joined, waiting for {}", round,
                 shown(config_.runId), joined,
                 joined < config_.minNodes ? fmt::format("at least {}", config_.minNodes)
                                           : std::string("the round to close"));
    reportedJoined = joined;
  }
  // What the user sees while it waits: who joined, as the store's records say (read only when a
  // line is due), and the time left. A big job's line counts the joiners and names none.
  if (!policy.mayLine(live.has_value())) return;
  if (!lines.due(now_(), policy.big() ? fmt::format("{}", joined)
                                      : fmt::format("{}", fmt::join(*live, ",")))) {
    return;
  }
  spdlog::warn("{}",
               joinWaitLine(round, config_.minNodes, config_.maxNodes, joined,
                            policy.big() ? std::vector<std::string>() : hostnames(*live),
                            policy.lineLeft(joined, budget, now_()), joined >= config_.minNodes));
}

std::optional<Round> Membership::takePlace(int round, const Closed& record) {
  // The round may have closed without us (last call ran out as we arrived): then we have no seat.
  if (record.closer < 0) {
    if (std::find(record.members.begin(), record.members.end(), self_.id) == record.members.end()) {
      return std::nullopt;
    }
    return readRound(round, record, std::nullopt);
  }
  auto seat = readSeat(round, record);
  if (!seat) return std::nullopt;
  return readRound(round, record, std::move(seat));
}

void Membership::waitForRoundToStop(int round) {
  const std::string stopKey = keys_.stop(round);
  if (control().check({stopKey})) return;  // over already (a finished run of this id, or a re-form)
  if (!waitingForPlace_.exchange(true))
    spdlog::warn("{}", spareWaitLine(config_.spares, config_.maxNodes));
  const struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{waitingForPlace_};
  while (!control().check({stopKey})) {
    throwIfStopped();
    try {
      control().wait({stopKey}, kJoinPollInterval * 4);
    } catch (const StoreTimeoutError&) {
    }
  }
  const auto stop = stopOf(round);
  if (stop && stop->kind == StopKind::kDone) {
    throw JobOverError(fmt::format(
        "the job finished (every node's workers succeeded) while this agent waited for a place in "
        "it (it keeps its maximum of {} nodes); this agent ran nothing",
        config_.maxNodes));
  }
}

}  // namespace ddprun::launcher
