#include "server/refusal_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace ddprun::rendezvous {

bool RefusalLog::shouldLog(const std::string& address, Clock::time_point now,
                           std::uint64_t& suppressed) {
  auto found = entries_.find(address);
  if (found != entries_.end() && now - found->second.loggedAt < kPeriod) {
    ++found->second.suppressed;
    return false;
  }
  suppressed = found != entries_.end() ? found->second.suppressed : 0;
  if (found == entries_.end() && entries_.size() >= kMaxAddresses) entries_.clear();
  entries_[address] = Entry{now, 0};
  return true;
}

void RefusalLog::report(const std::string& peer, const std::string& peerAddress,
                        std::string_view reason) {
  std::uint64_t suppressed = 0;
  if (!shouldLog(peerAddress, Clock::now(), suppressed)) return;
  spdlog::warn("refused a connection from {}: {}{}; further refusals of {} are counted, not "
               "logged, for {} s",
               peer, reason,
               suppressed > 0 ? fmt::format(" ({} more refused since the last line)", suppressed)
                              : std::string(),
               peerAddress, kPeriod.count());
}

}  // namespace ddprun::rendezvous
