#include "server/refusal_log.h"

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

}  // namespace ddprun::rendezvous
