// The rule of a process kept after the job on purpose (core/kept_process.h): which environment
// entry keeps it, what `ddprun detach` hands its command, and the exact match on an environ
// blob that the agent's stray sweep and the guardian make. Pure logic, plus one read of this
// process's own /proc/<pid>/environ.
#include "core/kept_process.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>

using namespace ddprun::launcher;
using namespace std::string_literals;

TEST_CASE("kept process: the entry names this agent's marker, never a bare flag",
          "[kept_process]") {
  CHECK(keptEntry("41823-9f3c0d2a6b11e4f0") == "DDPRUN_DETACHED=41823-9f3c0d2a6b11e4f0");
  CHECK(keptEntry("").empty());  // no marker: nothing is ever kept
}

TEST_CASE("kept process: detach swaps DDPRUN_AGENT for DDPRUN_DETACHED and keeps the rest",
          "[kept_process]") {
  const std::map<std::string, std::string> worker = {
      {"DDPRUN_AGENT", "7-abc"}, {"RANK", "3"}, {"PATH", "/usr/bin"}};
  const auto detached = detachedEnvironment(worker);
  CHECK(detached == std::map<std::string, std::string>{
                        {"DDPRUN_DETACHED", "7-abc"}, {"RANK", "3"}, {"PATH", "/usr/bin"}});
  // Not under ddprun: nothing to be kept from, nothing added.
  const std::map<std::string, std::string> plain = {{"PATH", "/usr/bin"}};
  CHECK(detachedEnvironment(plain) == plain);
  // A kept process that detaches again, under the same agent: still kept by it.
  CHECK(detachedEnvironment(detached) == detached);
  // An inherited DDPRUN_DETACHED (a job started from a kept process) is replaced by this agent's.
  CHECK(detachedEnvironment({{"DDPRUN_AGENT", "9-new"}, {"DDPRUN_DETACHED", "7-old"}}) ==
        std::map<std::string, std::string>{{"DDPRUN_DETACHED", "9-new"}});
  // An empty marker keeps nothing: no variable that would suggest otherwise.
  CHECK(detachedEnvironment({{"DDPRUN_AGENT", ""}}).empty());
}

TEST_CASE("kept process: an environ blob holds an entry only as one whole entry",
          "[kept_process]") {
  const std::string entry = "DDPRUN_DETACHED=7-abc";
  struct Case {
    std::string environ;
    bool holds;
  };
  const Case cases[] = {
      {"PATH=/bin\0DDPRUN_DETACHED=7-abc\0RANK=0\0"s, true},
      {"DDPRUN_DETACHED=7-abc\0"s, true},
      {"PATH=/bin\0DDPRUN_DETACHED=7-abc"s, true},  // the last entry without its NUL
      {"DDPRUN_DETACHED=7-abc"s, true},
      {"PATH=/bin\0DDPRUN_DETACHED=7-abcd\0"s, false},  // another agent's marker, longer
      {"PATH=/bin\0DDPRUN_DETACHED=7-ab\0"s, false},    // shorter
      {"XDDPRUN_DETACHED=7-abc\0"s, false},             // another variable's tail
      {"DDPRUN_DETACHED=1\0"s, false},                  // a bare flag
      {"FOO=DDPRUN_DETACHED=7-abc\0"s, false},          // inside another entry's value
      {"DDPRUN_DETACHED=7-abc\nX\0"s, false},
      {""s, false},
      {"\0\0\0"s, false},
  };
  for (const Case& c : cases) {
    std::string shown = c.environ;
    for (char& ch : shown)
      if (ch == '\0') ch = '|';
    INFO("environ: " << shown);
    CHECK(environHolds(c.environ, entry) == c.holds);
  }
  CHECK_FALSE(environHolds("A=1\0\0B=2\0"s, ""));  // an empty entry is never held
}

TEST_CASE("kept process: this process's own environ reads back", "[kept_process]") {
  const auto bytes = readEnviron(::getpid());
  REQUIRE(bytes);
  CHECK_FALSE(bytes->empty());
  CHECK_FALSE(readEnviron(0x3fffffff));  // no such process
}
