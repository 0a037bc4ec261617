// Jobs of report.sh workers (tests/launcher/workers/report.sh) run by real agents: each worker
// reports its ranks and runs until the file its --until names exists.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

namespace ddprun::test {

// Ends the job (creates `until`) and checks that each of `nodes` exits 0, all within `timeout`.
inline void finishJob(const std::string& until, const std::vector<Subprocess*>& nodes,
                      std::chrono::milliseconds timeout) {
  writeFile(until, "\n");
  const Deadline deadline(timeout);
  for (Subprocess* node : nodes) CHECK(exitsWith(*node, 0, deadline.left(), nodes));
}

}  // namespace ddprun::test
