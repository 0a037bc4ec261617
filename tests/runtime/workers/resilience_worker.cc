// A worker for the runtime's failure tests, run under ddprun: `--iterations` all-reduces of
// known values, each checked, summed into a checksum rank 0 prints at the end. In attempt 0
// (TORCHELASTIC_RESTART_COUNT=0) rank `--fault-rank` fails at iteration `--fault-at`:
//   kill  SIGKILL itself (its sockets close: peers see a broken connection)
//   hang  SIGSTOP itself (its sockets stay open: peers see nothing until their timeout)
//   exit-after-init  exit 1 right after init, before any collective (--fault-at is not used)
//   stall  stop calling collectives for ever, in stallForever() (its peers block in their next
//          all-reduce: a hang that only ddprun --hang-timeout ends, with both stacks recorded)
// A rank whose collective fails prints the error and exits 1, so the agent restarts the group.
// With --ignore-sigterm the agent's stop signal is ignored, so that a test sees every surviving
// rank fail its collective by itself instead of being stopped first (the agent's SIGKILL after
// --shutdown-timeout still ends a rank that would not fail).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/runtime/process_group.h"

// A named frame for the stack evidence to show.
[[noreturn]] __attribute__((noinline)) void stallForever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

int main(int argc, char** argv) {
  int iterations = 100;
  int faultRank = 1;
  int faultAt = -1;
  std::string fault = "none";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ignore-sigterm") {
      ::signal(SIGTERM, SIG_IGN);
      continue;
    }
    if (i + 1 == argc) break;
    const char* value = argv[++i];
    if (arg == "--iterations")
      iterations = std::atoi(value);
    else if (arg == "--fault")
      fault = value;
    else if (arg == "--fault-rank")
      faultRank = std::atoi(value);
    else if (arg == "--fault-at")
      faultAt = std::atoi(value);
  }
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int attempt = restarts != nullptr ? std::atoi(restarts) : 0;

  int rank = -1;
  try {
    auto group = ddprun::runtime::ProcessGroup::init();
    rank = group->rank();
    const int world = group->worldSize();
    if (attempt == 0 && rank == faultRank && fault == "exit-after-init") {
      std::fprintf(stderr, "rank %d: injecting 'exit-after-init'\n", rank);
      return 1;
    }
    std::int64_t checksum = 0;
    std::vector<std::int64_t> buffer(4096);
    for (int it = 0; it < iterations; ++it) {
      if (attempt == 0 && rank == faultRank && it == faultAt) {
        std::fprintf(stderr, "rank %d: injecting '%s' at iteration %d\n", rank, fault.c_str(), it);
        std::fflush(stderr);
        if (fault == "kill") ::raise(SIGKILL);
        if (fault == "hang") ::raise(SIGSTOP);
        if (fault == "stall") stallForever();
      }
      std::fill(buffer.begin(), buffer.end(), rank + it);
      group->allReduce(buffer.data(), buffer.size());
      const std::int64_t expected =
          std::int64_t{world} * it + std::int64_t{world} * (world - 1) / 2;
      for (std::int64_t v : buffer) {
        if (v != expected) {
          std::fprintf(stderr, "rank %d: iteration %d: got %lld, expected %lld\n", rank, it,
                       static_cast<long long>(v), static_cast<long long>(expected));
          return 1;
        }
      }
      checksum += buffer[0];
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    group->barrier();
    if (rank == 0) {
      std::printf("checksum %lld attempt %d\n", static_cast<long long>(checksum), attempt);
      std::fflush(stdout);
    }
  } catch (const ddprun::runtime::RuntimeError& error) {
    std::fprintf(stderr, "rank %d: collective failed: %s\n", rank, error.what());
    return 1;
  }
  return 0;
}
