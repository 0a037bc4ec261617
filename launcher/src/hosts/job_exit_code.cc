#include "hosts/job_exit_code.h"

#include <algorithm>
#include <array>

#include "core/exit_codes.h"
#include "hosts/ssh_driver.h"

namespace ddprun::launcher::hosts {
namespace {

// The classes' codes, and bad input's, worst first.
const std::array kOrder = {kExitUserError, exitCode(Ending::badInput({})), kExitMachineFault,
                           kExitBudgetSpent, kExitStopped};

}  // namespace

int worstHostClassCode(const std::vector<int>& hostCodes, std::optional<int> driverSignal) {
  std::vector<int> codes;
  for (const int code : hostCodes) codes.push_back(code == kSshFailed ? kExitMachineFault : code);
  if (driverSignal) codes.push_back(kExitStopped);
  for (const int code : kOrder) {
    if (std::find(codes.begin(), codes.end(), code) != codes.end()) return code;
  }
  for (const int code : codes) {
    if (code != 0) return code;
  }
  return 0;
}

}  // namespace ddprun::launcher::hosts
