#include "ddprun/common/signal_names.h"

#include <csignal>
#include <cstring>

namespace ddprun::common {

std::string signalName(int signal) {
  // SIGRTMIN is a function call in glibc (the threading library reserves the first few), so
  // real-time signals are named relative to it at run time, as Python does.
  if (signal >= SIGRTMIN && signal <= SIGRTMAX) {
    return signal == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  }
  if (const char* abbreviation = ::sigabbrev_np(signal); abbreviation != nullptr) {
    return std::string("SIG") + abbreviation;
  }
  return "SIG" + std::to_string(signal);
}

std::string signalNames(const std::vector<int>& signals) {
  std::string out;
  for (const int signal : signals) {
    if (!out.empty()) out += ',';
    out += signalName(signal);
  }
  return out;
}

}  // namespace ddprun::common
