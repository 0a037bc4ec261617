// Parsers for option values that are more than a number: each takes the value with its source
// and returns it typed, or throws a one-line UsageError that names the source and the fix.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/given_values.h"
#include "cli/helpers.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher::cli_detail {

// --nnodes: N or MIN:MAX with 0 < MIN <= MAX -> {MIN, MAX}.
std::pair<int, int> parseNnodes(const GivenValue& given);

// --nproc-per-node: a count in 1..kMaxNprocPerNode, or cpu, gpu, xpu, auto resolved on this host.
int resolveNprocPerNode(const GivenValue& given, const Environment& environment);

// --rdzv-id (or an id made from Slurm's variables, or for a launch over ssh): the value when it
// follows common::isRunId's rule, else a UsageError naming the rule.
std::string parseRunId(const GivenValue& given);

struct HostPort {
  std::string host;  // without an IPv6 address's brackets
  std::optional<std::uint16_t> port;
};

// --rdzv-endpoint: HOST, HOST:PORT, [IPv6] or [IPv6]:PORT; user information ("user:pw@") is
// refused, quoted as "***".
HostPort parseEndpoint(const GivenValue& given);

// -r/--redirects, -t/--tee: "0".."3" for every local rank, or LOCAL_RANK:N,...
StreamSelection parseStreamSelection(const GivenValue& given);

// --local-ranks-filter: comma list of ranks; nothing for an empty value (every rank).
std::optional<std::set<int>> parseLocalRanksFilter(const GivenValue& given);

// --duplicate-std{out,err}-filters: comma list where ",," stands for a literal comma.
std::vector<std::string> parseDuplicateFilters(std::string_view text);

// --signals-to-handle: names with or without SIG, any case -> signal numbers, each once.
std::vector<int> parseSignals(const GivenValue& given);

// Throws UsageError unless the value is one of its option's choices (the first is the example).
void checkChoice(const GivenValue& given);

}  // namespace ddprun::launcher::cli_detail
