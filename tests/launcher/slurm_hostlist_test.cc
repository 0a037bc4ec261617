// Slurm's hostlist syntax as ddprun expands it (cli/slurm_hostlist.h), case by case from Slurm's
// rules (src/common/hostlist.c): what a list means, and every list it refuses with what it says.
#include "cli/slurm_hostlist.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

using ddprun::launcher::cli_detail::expandSlurmHostlist;
using ddprun::launcher::cli_detail::kMaxHosts;
using ddprun::launcher::cli_detail::SlurmHostlistError;
using Hosts = std::vector<std::string>;

TEST_CASE("a Slurm hostlist expands as Slurm expands it") {
  struct Case {
    const char* list;
    Hosts hosts;
  };
  const std::vector<Case> cases = {
      {"node1", {"node1"}},
      {"127.0.0.1", {"127.0.0.1"}},
      {"a,b,c", {"a", "b", "c"}},
      {"a b\tc", {"a", "b", "c"}},  // blanks separate too
      {"a, b", {"a", "b"}},         // a blank beside a comma: one separator
      {"tux[0-2,5]", {"tux0", "tux1", "tux2", "tux5"}},
      {"tux[0-1,12,20-21]", {"tux0", "tux1", "tux12", "tux20", "tux21"}},
      {"node[08-10]", {"node08", "node09", "node10"}},  // width from the low bound
      {"node[8-10]", {"node8", "node9", "node10"}},
      {"linux[0000-0002]", {"linux0000", "linux0001", "linux0002"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},  // wider numbers keep their digits
      {"n[7]", {"n7"}},
      {"a[0-1].b[0-1]", {"a0.b0", "a0.b1", "a1.b0", "a1.b1"}},  // leftmost slowest
      {"rack[1-2]-n[01-02]", {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
      {"gpu[1-2]-ib", {"gpu1-ib", "gpu2-ib"}},  // text after the brackets
      {"127.0.0.[1-2]", {"127.0.0.1", "127.0.0.2"}},
      {"x[1,3],y[2-3]", {"x1", "x3", "y2", "y3"}},  // commas in brackets split ranges only
      {"[1-2]", {"1", "2"}},
      {"node-[1-2],login", {"node-1", "node-2", "login"}},
      {"n[5-5]", {"n5"}},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    CHECK(expandSlurmHostlist(c.list) == c.hosts);
  }
}

TEST_CASE("a hostlist ddprun cannot read is an error that says what is wrong, never a guess") {
  struct Case {
    std::string list;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"node[5-3]", "runs backwards"},
      {"node[1-2", "never closed"},
      {"node1-2]", "no '[' opened"},
      {"node[[1-2]]", "brackets inside brackets"},
      {"a,,b", "empty host name"},
      {",a", "empty host name"},
      {"a,", "empty host name"},
      {"node[]", "empty range"},
      {"node[1,,2]", "empty range"},
      {"node[1-]", "empty bound"},
      {"node[-1]", "empty bound"},  // a negative number
      {"node[a-c]", "is not a number"},
      {"node[1-2x3]", "is not a number"},  // 3-D box notation
      {"node[+1]", "is not a number"},
      {"node[0-65536]", "more than 65536 hosts"},     // one range over the cap
      {"a[0-999]b[0-999]", "more than 65536 hosts"},  // a product over the cap
      {"node[1234567890123456789]", "too long"},
      {std::string(254, 'n') + "[1-10]", "a host name longer than 255 characters"},
      {"n" + std::string(300, 'x') + ",b", "a host name longer than 255 characters"},
      {"", "empty"},
      {"  ", "empty"},
  };
  for (const auto& c : cases) {
    INFO(c.list);
    try {
      const auto hosts = expandSlurmHostlist(c.list);
      FAIL_CHECK("expanded to " << hosts.size() << " hosts");
    } catch (const SlurmHostlistError& error) {
      CHECK_THAT(error.what(), Catch::Contains(c.says));
    }
  }
}

TEST_CASE("a hostlist of exactly the cap expands, one more host is refused") {
  CHECK(expandSlurmHostlist(std::string(253, 'n') + "[1-99]").size() == 99);  // 255 characters
  CHECK(expandSlurmHostlist("n[0-65535]").size() == kMaxHosts);
  CHECK(expandSlurmHostlist("a[0-255]b[0-255]").size() == kMaxHosts);
  CHECK_THROWS_AS(expandSlurmHostlist("n[0-65535],extra"), SlurmHostlistError);
}

TEST_CASE("a hostlist bomb is refused from its length alone: counted before anything is expanded") {
  // Bracket groups whose product is astronomically over the cap, ~126 KB as an environment
  // variable can hold: one item of 14,000 groups, 14,000 items of one group each, and groups of
  // 10 (the product passes the cap late). Each used to be expanded group by group first (1 GiB
  // for 9 KB). Counted arithmetically now: refused in well under a millisecond each on an idle
  // machine; the bound here is a hang guard for a loaded, instrumented build.
  std::string oneItem = "n";
  std::string manyItems;
  std::string tens = "n";
  for (int i = 0; i < 14000; ++i) {
    oneItem += "[0-65534]";
    manyItems += (i == 0 ? "" : ",") + std::string("n[0-65534]");
  }
  for (int i = 0; i < 25000; ++i) tens += "[0-9]";
  for (const std::string* bomb : {&oneItem, &manyItems, &tens}) {
    INFO(bomb->size() << " bytes: " << bomb->substr(0, 40));
    CHECK(bomb->size() >= 125'000);
    const auto started = std::chrono::steady_clock::now();
    try {
      const auto hosts = expandSlurmHostlist(*bomb);
      FAIL_CHECK("expanded to " << hosts.size() << " hosts");
    } catch (const SlurmHostlistError& error) {
      const std::string message = error.what();
      CHECK_THAT(message,
                 Catch::Contains("more than 65536 hosts") || Catch::Contains("longer than 255"));
      CHECK(message.size() < 400);  // the list is quoted cut
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    WARN("refused in " << took * 1000 << " ms");
    CHECK(took < 2.0);
  }
}
