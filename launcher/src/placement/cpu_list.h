// The kernel's CPU list format ("0-3,8,10-11": sysfs cpulist, thread_siblings_list,
// shared_cpu_list, /proc/self/status Cpus_allowed_list), read and written.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace ddprun::launcher {

using CpuSet = std::set<int>;

// The CPUs `text` lists (blanks and a trailing newline ignored; "" is the empty set), or nothing
// when it is not a CPU list.
std::optional<CpuSet> parseCpuList(std::string_view text);

// `cpus` as the kernel writes a list: ascending, runs as "first-last" ("" for none).
std::string cpuListText(const CpuSet& cpus);

}  // namespace ddprun::launcher
