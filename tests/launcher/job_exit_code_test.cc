// The exit code of a launch over ssh with --exit-codes classes (hosts/job_exit_code.h): the
// worst host's class by the fixed order a scheduler can act on.
#include "hosts/job_exit_code.h"

#include <catch2/catch.hpp>

#include "core/exit_codes.h"

using namespace ddprun::launcher;
using hosts::worstHostClassCode;

TEST_CASE("the ssh launch's classes code: the worst host's class", "[ssh][unit]") {
  CHECK(worstHostClassCode({0, 0, 0}, std::nullopt) == 0);
  // A user's bug anywhere: do not requeue, whatever the others say.
  CHECK(worstHostClassCode({kExitStopped, kExitMachineFault, kExitUserError, kExitBudgetSpent},
                           std::nullopt) == kExitUserError);
  CHECK(worstHostClassCode({0, 2, kExitMachineFault}, std::nullopt) == 2);  // bad input: the user's
  // A node left out (82) while the others later spent the budget (81): requeue elsewhere.
  CHECK(worstHostClassCode({kExitBudgetSpent, kExitMachineFault, kExitBudgetSpent}, std::nullopt) ==
        kExitMachineFault);
  CHECK(worstHostClassCode({kExitStopped, kExitBudgetSpent}, std::nullopt) == kExitBudgetSpent);
  // A host ssh could not reach (255) is the machine's.
  CHECK(worstHostClassCode({0, 255, kExitBudgetSpent}, std::nullopt) == kExitMachineFault);
  // The driver's own signal is a stop from outside, below any failure a host reported.
  CHECK(worstHostClassCode({130, 130}, 2) == kExitStopped);
  CHECK(worstHostClassCode({kExitBudgetSpent, kExitStopped}, 15) == kExitBudgetSpent);
  // An agent without the classes (another code): the first such in host order.
  CHECK(worstHostClassCode({0, 7, 9}, std::nullopt) == 7);
  CHECK(worstHostClassCode({7, kExitStopped}, std::nullopt) == kExitStopped);
}
