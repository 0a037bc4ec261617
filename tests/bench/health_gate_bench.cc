// The health gate's cost per round (docs/health.md; goal: at most 100 ms per node per round
// without the hooks): times NodeHealthGate::builtIn(), the GPU checks through NVML when
// libnvidia-ml.so.1 is found and the free-space checks, the first call (NVML's load and
// initialisation) apart from the next ones (what every later round pays).
//
//   ddprun-health-gate-bench [ROUNDS]     (default 50)
//
// Prints one line per figure; the verdict of the last call too, so a sick node is visible.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "health/node_health_gate.h"
#include "no_loop.h"

namespace {

using namespace ddprun::launcher;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  HealthPolicy policy;
  NodeHealthFacts facts;
  facts.hostname = "bench";
  facts.agentMarker = "bench";
  if (const char* tmp = std::getenv("TMPDIR")) facts.tmpDir = tmp;
  if (const char* mask = std::getenv("CUDA_VISIBLE_DEVICES")) facts.cudaVisibleDevices = mask;
  ddprun::test::NoLoop loop;  // never run: builtIn() runs on the calling thread
  NodeHealthGate gate(policy, facts, loop);
  auto start = Clock::now();
  std::optional<HealthVerdict> verdict = gate.builtIn();
  const double first = msSince(start);
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    start = Clock::now();
    verdict = gate.builtIn();
    times.push_back(msSince(start));
  }
  std::sort(times.begin(), times.end());
  std::printf("first round (NVML loaded and initialised if present): %.3f ms\n", first);
  std::printf("next %d rounds: median %.3f ms, max %.3f ms\n", rounds, times[times.size() / 2],
              times.back());
  std::printf("verdict: %s\n",
              verdict ? (verdict->check + ": " + verdict->reason).c_str() : "pass");
  return 0;
}
