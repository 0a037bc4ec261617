// The kernel's floor for a launch: posix_spawn N copies of a program and wait for them all, as a
// launcher that does nothing else would. bench_launcher.py times this program the same way it
// times ddprun (its own exec and dynamic linking included), so the ratio is what ddprun's own
// work costs on top of starting the processes.
//
//   ddprun-spawn-floor <count> <program> [args...]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ddprun-spawn-floor <count> <program> [args...]\n");
    return 2;
  }
  const int count = std::atoi(argv[1]);
  if (count <= 0 || count > 4096) {
    std::fprintf(stderr, "ddprun-spawn-floor: count must be 1..4096\n");
    return 2;
  }
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    pid_t pid = 0;
    if (const int error = ::posix_spawnp(&pid, argv[2], nullptr, nullptr, argv + 2, environ)) {
      std::fprintf(stderr, "ddprun-spawn-floor: posix_spawnp %s: error %d\n", argv[2], error);
      return 1;
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : children) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
