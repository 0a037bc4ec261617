// Slurm's hostlist syntax (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST), expanded by ddprun itself:
// `scontrol show hostnames` is often missing in containers, and scripts that fell back to
// "localhost" when it was made every node a world of one (docs/slurm.md).
//
// The rules are Slurm's own (src/common/hostlist.c):
//   - hosts are separated by ',' or blanks; a ',' inside brackets separates ranges, not hosts;
//   - an item is text with bracket groups, each a comma list of N or LO-HI (decimal digits);
//   - a number keeps the width of the range's low bound: node[08-10] -> node08, node09, node10;
//     node[8-10] -> node8, node9, node10;
//   - several groups are a cartesian product, the leftmost slowest:
//     a[0-1].b[0-1] -> a0.b0, a0.b1, a1.b0, a1.b1.
// Anything else (LO > HI, a bracket not closed or not opened, nested brackets, an empty host or
// range, a sign or another non-digit in a range, more than kMaxHosts hosts, a name longer than
// kMaxHostName) is a SlurmHostlistError:
// a list ddprun cannot read is never guessed at.
//
// Not the hosts of a launch over ssh (hosts/host_list.h: --hosts, hostfiles, --include/--exclude):
// this is Slurm's bracket syntax, read from Slurm's environment only.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::launcher::cli_detail {

// Slurm caps one range, and a prefix's expansions, at 64 Ki hosts (MAX_RANGE, MAX_PREFIX_CNT);
// ddprun caps the whole list there: a larger one is a typo, and would only cost memory.
inline constexpr std::size_t kMaxHosts = 65536;

// A DNS name is at most 253 characters; Slurm's node names are shorter still.
inline constexpr std::size_t kMaxHostName = 255;

// what(): what is wrong with the list, without naming where it came from (the caller does).
class SlurmHostlistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The host names, in Slurm's order. Throws SlurmHostlistError.
std::vector<std::string> expandSlurmHostlist(std::string_view text);

}  // namespace ddprun::launcher::cli_detail
