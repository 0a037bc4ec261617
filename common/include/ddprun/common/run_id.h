// What a run id (--rdzv-id, PET_RDZV_ID, TORCHELASTIC_RUN_ID) may be: a name, never a path. It
// becomes one segment of every rendezvous key ("ddprun/<run id>/...", on a c10d store and on an
// etcd shared by many jobs), so a '/' would put one job inside another's keys (job "P/x" under
// job "P", whose prefix delete at its end would wipe it), and a control byte would reach logs and
// terminals. One rule, here, for every id: given, from Slurm (slurm-<job>.<step>), made for a
// launch over ssh (ssh-<hex>) or for --standalone (hex).
//
// Kept valid: torchrun's default "none", Slurm job ids, Kubeflow's PET_RDZV_ID (a job or pod
// name: lowercase letters, digits, '-', '.'), UUIDs.
#pragma once

#include <cstddef>
#include <string_view>

namespace ddprun::common {

inline constexpr std::size_t kMaxRunIdBytes = 128;

// The rule in words, for the one line that refuses an id.
inline constexpr std::string_view kRunIdRule =
    "a run id is 1..128 of A-Z a-z 0-9 . _ - (not starting with . or -)";

// Whether `id` follows the rule: 1..kMaxRunIdBytes bytes of [A-Za-z0-9._-], the first not '.' or
// '-' (so "." and ".." are out, and no id reads as an option).
bool isRunId(std::string_view id);

}  // namespace ddprun::common
