// Where ddprun's rendezvous keeps its keys in a store: everything of its own under
// kRendezvousKeyPrefix, every key of one run under runKeyPrefix(run id). The store seam needs this
// much of the layout (a static store's worker keys are the others; an etcd's probe reads one of the
// run's keys); membership/membership_keys.h lays out what is under a run's prefix.
//
// Thread safety: constants and a pure function.
#pragma once

#include <string>
#include <string_view>

namespace ddprun::launcher {

// What every key of the rendezvous' own starts with: a store's other keys are its workers' (the
// static backend shares the store with them; StaticStoreFacet::clearWorkerKeys keeps these).
inline constexpr std::string_view kRendezvousKeyPrefix = "ddprun/";

// "ddprun/<run id>/": what every key of run `runId` starts with. `runId` is a run id
// (common::isRunId, checked by MembershipKeys), so no run's prefix is inside another's.
inline std::string runKeyPrefix(std::string_view runId) {
  std::string prefix(kRendezvousKeyPrefix);
  prefix.append(runId);
  prefix += '/';
  return prefix;
}

}  // namespace ddprun::launcher
