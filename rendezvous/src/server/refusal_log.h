// RefusalLog: decides which refused connections get a log line. A peer that fails the token
// handshake is named once, then counted silently for a while: a scanner or a misconfigured job
// retrying thousands of times must not flood the log (or cost the loop its time formatting lines).
//
// Lives on the server's event-loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ddprun::rendezvous {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;

  // Whether to log a refusal of `address` (an IP, no port) now; if so, `suppressed` is how many
  // refusals of that address went unlogged since its last line.
  bool shouldLog(const std::string& address, Clock::time_point now, std::uint64_t& suppressed);
  // The warning line for a refusal of `peer` (address and port) at `peerAddress`, when shouldLog
  // allows it; `reason` says what the connection did.
  void report(const std::string& peer, const std::string& peerAddress, std::string_view reason);

  // One line per address per this period.
  static constexpr std::chrono::seconds kPeriod{60};
  // Addresses remembered at most: beyond this the table is cleared (a spoofing flood of many
  // addresses must not grow it without bound; the cost is a few repeated lines).
  static constexpr std::size_t kMaxAddresses = 4096;

 private:
  struct Entry {
    Clock::time_point loggedAt;
    std::uint64_t suppressed = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace ddprun::rendezvous
