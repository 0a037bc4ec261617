// The kernel's floor for a launch: posix_spawn N copies of a program and wait for them all, as a
// launcher that does nothing else would. bench_launcher.py times this program the same way it
// times ddprun (its own exec and dynamic linking included), so the ratio is what ddprun's own
// work costs on top of starting the processes.
//
//   ddprun-spawn-floor [--stamp FILE] <count> <program> [args...]
//
// --stamp FILE: the floor of a restart (a fresh spawn of N): the wall clock (seconds, as
// `date +%s.%N` writes it) goes to FILE just before the first spawn, and each child gets RANK=<i>
// and WORLD_SIZE=<count>, so that tests/bench/restart_probe.sh workers (which record when they
// started) can be timed from that moment exactly as a restart is timed from a worker's death.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

extern char** environ;

namespace {

// environ with RANK and WORLD_SIZE replaced: what a launcher hands each worker at the least.
std::vector<std::string> rankedEnvironment(int rank, int count) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "RANK=", 5) != 0 && std::strncmp(*entry, "WORLD_SIZE=", 11) != 0) {
      entries.emplace_back(*entry);
    }
  }
  entries.push_back("RANK=" + std::to_string(rank));
  entries.push_back("WORLD_SIZE=" + std::to_string(count));
  return entries;
}

}  // namespace

int main(int argc, char** argv) {
  const char* stamp = nullptr;
  if (argc >= 3 && std::strcmp(argv[1], "--stamp") == 0) {
    stamp = argv[2];
    argc -= 2;
    argv += 2;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: ddprun-spawn-floor [--stamp FILE] <count> <program> [args...]\n");
    return 2;
  }
  const int count = std::atoi(argv[1]);
  if (count <= 0 || count > 4096) {
    std::fprintf(stderr, "ddprun-spawn-floor: count must be 1..4096\n");
    return 2;
  }
  // Built before the clock starts: the restart's floor is the spawns, not this bookkeeping.
  std::vector<std::vector<std::string>> environments;
  std::vector<std::vector<char*>> envps;
  if (stamp != nullptr) {
    for (int i = 0; i < count; ++i) environments.push_back(rankedEnvironment(i, count));
    for (auto& entries : environments) {
      std::vector<char*> envp;
      for (auto& entry : entries) envp.push_back(entry.data());
      envp.push_back(nullptr);
      envps.push_back(std::move(envp));
    }
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    FILE* out = std::fopen(stamp, "w");
    if (out == nullptr) {
      std::fprintf(stderr, "ddprun-spawn-floor: cannot write %s\n", stamp);
      return 1;
    }
    std::fprintf(out, "%lld.%09ld\n", static_cast<long long>(now.tv_sec), now.tv_nsec);
    std::fclose(out);
  }
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    pid_t pid = 0;
    char** envp = stamp != nullptr ? envps[i].data() : environ;
    if (const int error = ::posix_spawnp(&pid, argv[2], nullptr, nullptr, argv + 2, envp)) {
      std::fprintf(stderr, "ddprun-spawn-floor: posix_spawnp %s: error %d\n", argv[2], error);
      return 1;
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failed;
  }
  return failed == 0 ? 0 : 1;
}
