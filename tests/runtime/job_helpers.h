// What the runtime tests share about the jobs they run under ddprun: the command line and the
// line matchers (from tests/support), and the checksum resilience_worker prints. Needs
// DDPRUN_BIN defined by the target.
#pragma once

#include "ddprun_command.h"
#include "lines.h"

namespace ddprun::test {

// What resilience_worker's rank 0 prints as "checksum": the sum over iterations of the
// all-reduced value (world * it + world * (world - 1) / 2).
inline long long expectedChecksum(int world, int iterations) {
  long long sum = 0;
  for (int it = 0; it < iterations; ++it) sum += world * it + world * (world - 1) / 2;
  return sum;
}

}  // namespace ddprun::test
