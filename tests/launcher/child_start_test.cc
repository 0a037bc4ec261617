// Starting a child program (core/child_start.h), the steps every child of ddprun takes before
// exec: a parent learns through the report pipe which step failed and why, so it can say in one
// line what could not be started; a child that started has the descriptors, group and directory
// it was given.
#include "core/child_start.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;

struct Command {
  explicit Command(std::vector<std::string> command) : words(std::move(command)) {
    for (auto& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
  }
  std::vector<std::string> words;
  std::vector<char*> argv;
};

int exitStatusOf(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

std::string readAll(int fd) {
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  ::close(fd);
  return text;
}

TEST_CASE("a program that does not exist is reported as such, in one line", "[child_start][unit]") {
  Command command({"/nonexistent/ddprun-no-such-program"});
  const SpawnedChild child =
      spawnChild(ChildSteps{}, command.argv[0], command.argv.data(), environ);
  CHECK(child.pid == -1);
  REQUIRE(child.failure);
  CHECK(child.failure->step == ChildStep::kExec);
  CHECK(child.failure->error == ENOENT);
  CHECK(startFailureText("ssh for host a", *child.failure) ==
        "cannot start ssh for host a: No such file or directory");
}

TEST_CASE("a file that is not executable, and a missing working directory, are told apart",
          "[child_start][unit]") {
  ddprun::test::TempDir dir;
  const std::string script = dir.path + "/script";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  ::chmod(script.c_str(), 0644);
  Command notExecutable({script});
  const SpawnedChild refused =
      spawnChild(ChildSteps{}, notExecutable.argv[0], notExecutable.argv.data(), environ);
  REQUIRE(refused.failure);
  CHECK(refused.failure->step == ChildStep::kExec);
  CHECK(refused.failure->error == EACCES);

  Command shell({"/bin/sh", "-c", "exit 0"});
  ChildSteps steps;
  const std::string missing = dir.path + "/gone";
  steps.workingDirectory = missing.c_str();
  const SpawnedChild lost = spawnChild(steps, shell.argv[0], shell.argv.data(), environ);
  REQUIRE(lost.failure);
  CHECK(lost.failure->step == ChildStep::kDirectory);
  CHECK(lost.failure->error == ENOENT);
}

TEST_CASE("a started child has its descriptors, its own group and its directory",
          "[child_start][unit]") {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  // Its group, its directory, and whether a descriptor of the parent's reached it.
  // Not close-on-exec in the parent: the child's steps must close it anyway.
  const int stray = ::dup(out[0]);
  const std::string probe = "echo $(cut -d' ' -f5 /proc/$$/stat) $$ $(pwd); [ -e /proc/$$/fd/" +
                            std::to_string(stray) + " ] && echo leaked; exit 7";
  Command shell({"/bin/sh", "-c", probe});
  ChildSteps steps;
  steps.group = ChildSteps::Group::kNewGroup;
  steps.dieWithParent = ::getpid();
  steps.stdoutFd = out[1];
  steps.workingDirectory = "/";
  const SpawnedChild child = spawnChild(steps, shell.argv[0], shell.argv.data(), environ);
  ::close(out[1]);
  ::close(stray);
  REQUIRE_FALSE(child.failure);
  REQUIRE(child.pid > 0);
  const std::string text = readAll(out[0]);
  CHECK(exitStatusOf(child.pid) == 7);
  const std::string pid = std::to_string(child.pid);
  CHECK(text == pid + " " + pid + " /\n");
}

}  // namespace
