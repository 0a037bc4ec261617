// Signal names as torchrun prints them (Python's signal.Signals(n).name).
#pragma once

#include <string>
#include <vector>

namespace ddprun::common {

// "SIGSEGV" for 11, "SIGRTMIN" / "SIGRTMIN+2" for real-time signals, "SIG<n>" when the number is
// not a signal this system knows.
std::string signalName(int signal);

// signalName of each, comma-separated: "SIGTERM,SIGINT" (the form of
// TORCHELASTIC_SIGNALS_TO_HANDLE). Empty for no signals.
std::string signalNames(const std::vector<int>& signals);

}  // namespace ddprun::common
