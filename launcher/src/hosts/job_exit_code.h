// The exit code of a launch over ssh with --exit-codes classes: the worst host's class, by a
// fixed order, so that a scheduler reads one answer when the hosts disagree (docs/ssh.md,
// "Exit codes"). Pure.
//
//   80  the user's error on any host (do not requeue: the bug is in the job, wherever it showed)
//    2  bad input on any host (the user's too: nothing would go better on a requeue)
//   82  a machine fault (a host's agent said so, or ssh could not reach a host: its 255):
//       requeue, preferably elsewhere
//   81  the restart budget spent: the operator's call
//   83  stopped from outside (a host's, or the driver's own signal): requeue
//       any other non-zero code, the first in host order (an agent older than the classes)
//    0  every host succeeded
//
// Thread safety: a pure function.
#pragma once

#include <optional>
#include <vector>

namespace ddprun::launcher::hosts {

// `hostCodes`: each host's exit code, in host order (ssh's 255 for a host it could not reach);
// `driverSignal`: the signal the driver got and passed on, if any.
int worstHostClassCode(const std::vector<int>& hostCodes, std::optional<int> driverSignal);

}  // namespace ddprun::launcher::hosts
