#include "membership/membership_keys.h"

#include <fmt/format.h>

#include <stdexcept>

#include "ddprun/common/run_id.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

std::string_view checkedRunId(std::string_view runId) {
  if (!common::isRunId(runId)) {
    throw std::invalid_argument(
        fmt::format("run id '{}': {}", common::printablePrefix(runId), common::kRunIdRule));
  }
  return runId;
}

}  // namespace

MembershipKeys::MembershipKeys(std::string_view runId)
    : prefix_(runKeyPrefix(checkedRunId(runId))) {}

std::string MembershipKeys::nextNodeId() const { return prefix_ + "next_node_id"; }

std::string MembershipKeys::node(std::int64_t id) const {
  return fmt::format("{}{}", nodePrefix(), id);
}

std::string MembershipKeys::nodePrefix() const { return prefix_ + "node/"; }

std::string MembershipKeys::alive(std::int64_t id) const {
  return fmt::format("{}{}", alivePrefix(), id);
}

std::string MembershipKeys::alivePrefix() const { return prefix_ + "alive/"; }

std::string MembershipKeys::currentRound() const { return prefix_ + "current_round"; }

std::string MembershipKeys::roundPrefix(int round) const {
  return fmt::format("{}round/{}/", prefix_, round);
}

std::string MembershipKeys::joined(int round) const { return roundPrefix(round) + "joined"; }

std::string MembershipKeys::member(int round, int slot) const {
  return fmt::format("{}{}", memberPrefix(round), slot);
}

std::string MembershipKeys::memberPrefix(int round) const { return roundPrefix(round) + "member/"; }

std::string MembershipKeys::closed(int round) const { return roundPrefix(round) + "closed"; }

std::string MembershipKeys::world(int round, std::int64_t closer) const {
  return fmt::format("{}world/{}", roundPrefix(round), closer);
}

std::string MembershipKeys::seat(int round, std::int64_t closer, std::int64_t id) const {
  return fmt::format("{}seat/{}/{}", roundPrefix(round), closer, id);
}

std::string MembershipKeys::master(int round) const { return roundPrefix(round) + "master"; }

std::string MembershipKeys::stop(int round) const { return roundPrefix(round) + "stop"; }

std::string MembershipKeys::done(int round) const { return roundPrefix(round) + "done"; }
std::string MembershipKeys::finished(int round, std::int64_t id) const {
  return finishedPrefix(round) + std::to_string(id);
}

std::string MembershipKeys::finishedPrefix(int round) const {
  return roundPrefix(round) + "finished/";
}

std::string MembershipKeys::status(std::int64_t id) const {
  return fmt::format("{}{}", statusPrefix(), id);
}

std::string MembershipKeys::statusPrefix() const { return prefix_ + "status/"; }

}  // namespace ddprun::launcher
