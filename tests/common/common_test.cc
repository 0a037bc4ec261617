// ddprun::common: the helpers the launcher and the runtime share.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdint>
#include <map>
#include <string>

#include "ddprun/common/descriptor_limit.h"
#include "ddprun/common/local_address.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/port.h"
#include "ddprun/common/run_id.h"
#include "ddprun/common/shown_key.h"
#include "ddprun/common/signal_names.h"
#include "ddprun/common/template.h"
#include "ddprun/common/text.h"
#include "ddprun/common/worker_env_names.h"
#include "temp_dir.h"

using namespace ddprun::common;
using ddprun::test::writeFile;

TEST_CASE("safeSubstitute behaves like string.Template.safe_substitute", "[common]") {
  const std::map<std::string, std::string> values = {{"local_rank", "3"}, {"rank", "11"}};
  CHECK(safeSubstitute("--ckpt=/ckpt/${local_rank}", values) == "--ckpt=/ckpt/3");
  CHECK(safeSubstitute("$local_rank/$rank", values) == "3/11");
  CHECK(safeSubstitute("${rank}x$rank", values) == "11x11");
  CHECK(safeSubstitute("cost $$5", values) == "cost $5");
  CHECK(safeSubstitute("$$local_rank", values) == "$local_rank");
  // Unknown and malformed placeholders stay as written.
  CHECK(safeSubstitute("$rank_x ${nope} $nope", values) == "$rank_x ${nope} $nope");
  CHECK(safeSubstitute("$ $1 ${} ${ra nk} ${rank", values) == "$ $1 ${} ${ra nk} ${rank");
  CHECK(safeSubstitute("end$", values) == "end$");
  CHECK(safeSubstitute("", values).empty());
  CHECK(safeSubstitute("$rank", {}) == "$rank");
  // A substituted value is not substituted again.
  CHECK(safeSubstitute("${a}", {{"a", "$rank"}, {"rank", "no"}}) == "$rank");
}

TEST_CASE("signal names: Python's spelling, real-time signals and unknown numbers", "[common]") {
  CHECK(signalName(SIGTERM) == "SIGTERM");
  CHECK(signalName(SIGSEGV) == "SIGSEGV");
  CHECK(signalName(SIGRTMIN) == "SIGRTMIN");
  CHECK(signalName(SIGRTMIN + 2) == "SIGRTMIN+2");
  CHECK(signalName(200) == "SIG200");
  CHECK(signalNames({SIGTERM, SIGINT, SIGHUP, SIGQUIT}) == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(signalNames({}).empty());
}

TEST_CASE("findExecutable searches like execvp", "[common]") {
  ddprun::test::TempDir first;
  ddprun::test::TempDir second;
  writeFile(first.path + "/tool", "#!/bin/sh\n", 0644);  // not executable: skipped
  writeFile(second.path + "/tool", "#!/bin/sh\n", 0755);
  REQUIRE(::mkdir((first.path + "/dir").c_str(), 0755) == 0);  // a directory never matches
  const std::string path = first.path + ":" + second.path;

  CHECK(findExecutable("tool", path) == second.path + "/tool");
  CHECK_FALSE(findExecutable("dir", path));
  CHECK_FALSE(findExecutable("missing", path));
  CHECK_FALSE(findExecutable("", path));
  // A name with '/' is not searched for.
  CHECK(findExecutable(second.path + "/tool", "/nonexistent") == second.path + "/tool");
  CHECK_FALSE(findExecutable(first.path + "/tool", second.path));
  CHECK_FALSE(findExecutable("sub/tool", second.path));
  CHECK(isExecutableFile(second.path + "/tool"));
  CHECK_FALSE(isExecutableFile(first.path + "/tool"));

  // PATH from an environment map; without one, execvp's default.
  CHECK(findExecutable("tool", std::map<std::string, std::string>{{"PATH", path}}) ==
        second.path + "/tool");
  CHECK(findExecutable("sh", std::map<std::string, std::string>{}).value_or("").ends_with("/sh"));
  CHECK(std::string(kDefaultSearchPath) == "/bin:/usr/bin");
}

TEST_CASE("findExecutable: an empty PATH entry is the working directory", "[common]") {
  ddprun::test::TempDir dir;
  writeFile(dir.path + "/here", "#!/bin/sh\n", 0755);
  char previous[4096] = {};
  REQUIRE(::getcwd(previous, sizeof previous) != nullptr);
  REQUIRE(::chdir(dir.path.c_str()) == 0);
  const auto leading = findExecutable("here", ":/nonexistent");
  const auto trailing = findExecutable("here", "/nonexistent:");
  const auto middle = findExecutable("here", "/nonexistent::/also-not");
  REQUIRE(::chdir(previous) == 0);
  CHECK(leading == "./here");
  CHECK(trailing == "./here");
  CHECK(middle == "./here");
}

TEST_CASE("localAddressToward names the source address of the route", "[common]") {
  CHECK(localAddressToward("127.0.0.1", 29500) == "127.0.0.1");
  CHECK(localAddressToward("127.0.0.5", 0) == "127.0.0.1");  // port 0: any port
  CHECK_FALSE(localAddressToward("no-such-host.invalid", 1));
  if (const auto v6 = localAddressToward("::1", 1)) CHECK(*v6 == "::1");  // hosts without IPv6 skip
}

TEST_CASE("worker environment names are torchrun's", "[common]") {
  CHECK(std::string(kEnvRank) == "RANK");
  CHECK(std::string(kEnvLocalRank) == "LOCAL_RANK");
  CHECK(std::string(kEnvTorchelasticUseAgentStore) == "TORCHELASTIC_USE_AGENT_STORE");
  CHECK(std::string(kAgentStoreEnabled) == "True");
  CHECK(std::string(kEnvDdprunAgent) == "DDPRUN_AGENT");
}

TEST_CASE(
    "raiseDescriptorLimit lifts the soft descriptor limit to the hard one and keeps the one it "
    "started with",
    "[common]") {
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit lowered = saved;
  lowered.rlim_cur = std::min<rlim_t>(saved.rlim_max, 64);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  const DescriptorLimit limit = raiseDescriptorLimit();
  rlimit now{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  CHECK(now.rlim_cur == saved.rlim_max);
  CHECK(limit.inForce ==
        (saved.rlim_max == RLIM_INFINITY ? SIZE_MAX : static_cast<std::size_t>(saved.rlim_max)));
  REQUIRE(limit.started);
  CHECK(limit.started->rlim_cur == lowered.rlim_cur);
  CHECK(limit.started->rlim_max == saved.rlim_max);
}

TEST_CASE("printable: one line, no control sequence a terminal acts on, UTF-8 kept", "[common]") {
  using ddprun::common::printable;
  CHECK(printable("plain text, ünïcode, 漢字") == "plain text, ünïcode, 漢字");
  CHECK(printable("a\nb\tc\r\x1b[2J\x07\x7f") == "a\\nb\\tc\\x0d\\x1b[2J\\x07\\x7f");
  // C1 controls: U+009B (CSI) as UTF-8, and a lone 0x9b an 8-bit terminal reads as CSI.
  CHECK(printable("x\xc2\x9b"
                  "2J") == "x\\xc2\\x9b2J");
  CHECK(printable("x\x9b"
                  "2J") == "x\\x9b2J");
  CHECK(printable("\xc2\xa0 nbsp, \xc4\x80 A-macron") == "\xc2\xa0 nbsp, \xc4\x80 A-macron");
  CHECK(printable("cut \xe2\x82") == "cut \\xe2\\x82");  // a sequence cut short is no UTF-8
  CHECK(ddprun::common::printablePrefix(std::string(300, 'k')).size() ==
        ddprun::common::kShownBytes);
}

TEST_CASE("printable: no bidi control reorders the line as shown", "[common]") {
  using ddprun::common::printable;
  // U+202E (right-to-left override) in a host name: "gpu-a\u202e1gnp.exe" would show reversed.
  CHECK(printable("gpu-a\xe2\x80\xae"
                  "1gnp") == "gpu-a\\u202e1gnp");
  // Every other embedding, override, isolate and mark.
  CHECK(printable("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad") ==
        "\\u202a\\u202b\\u202c\\u202d");
  CHECK(printable("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9") ==
        "\\u2066\\u2067\\u2068\\u2069");
  CHECK(printable("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c") == "\\u200e\\u200f\\u061c");
  // Their neighbours are text: U+202F (narrow no-break space), U+2070, an Arabic letter.
  CHECK(printable("\xe2\x80\xaf \xe2\x81\xb0 \xd8\xa8") == "\xe2\x80\xaf \xe2\x81\xb0 \xd8\xa8");
}

TEST_CASE("printableJson: the same JSON value, with no control or bidi character left raw",
          "[common]") {
  using ddprun::common::printableJson;
  // DEL, C1 (U+009B) and U+202E inside a string become \u escapes; other UTF-8 stays readable.
  CHECK(printableJson("{\"h\":\"a\x7f"
                      "b\xc2\x9b"
                      "c\xe2\x80\xae"
                      "d \xe6\xbc\xa2\"}") == "{\"h\":\"a\\u007fb\\u009bc\\u202ed \xe6\xbc\xa2\"}");
  // A writer's escapes and the whitespace between tokens (an indented dump) are kept.
  CHECK(printableJson("{\n  \"k\": \"\\u001b[2J\\n\"\n}") == "{\n  \"k\": \"\\u001b[2J\\n\"\n}");
  // A byte that is no UTF-8 (a writer told to keep it) becomes U+FFFD.
  CHECK(printableJson("[\"\xff\"]") == "[\"\\ufffd\"]");
}

TEST_CASE("validUtf8: each byte that is no UTF-8 becomes U+FFFD", "[common]") {
  using ddprun::common::validUtf8;
  CHECK(validUtf8("ok ü") == "ok ü");
  CHECK(validUtf8("a\xff"
                  "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(validUtf8("\xed\xa0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
}

TEST_CASE("run ids: a name of 1..128 of A-Z a-z 0-9 . _ -, never a path", "[common]") {
  for (const std::string id :
       {"none", "job1", "slurm-12345.0", "ssh-0123456789abcdef", "pytorchjob-mnist-master-0",
        "123e4567-e89b-12d3-a456-426614174000", "A_b.c-d", "_x", "a..", "7"}) {
    INFO(id);
    CHECK(isRunId(id));
  }
  CHECK(isRunId(std::string(kMaxRunIdBytes, 'a')));
  CHECK_FALSE(isRunId(std::string(kMaxRunIdBytes + 1, 'a')));
  for (const std::string id : {"", ".", "..", ".a", "-a", "a/b", "/", "a b", "a\\b", "a\x1b",
                               "a\x07", "j\xc3\xa9", "a:b", "a@b", "a*"}) {
    INFO(printable(id));
    CHECK_FALSE(isRunId(id));
  }
  CHECK_FALSE(isRunId(std::string("a\0b", 3)));
}

TEST_CASE("withoutUserinfo: what precedes an address's last '@' is never shown", "[common]") {
  CHECK(withoutUserinfo("http://u:pw@h:2379") == "http://***@h:2379");
  CHECK(withoutUserinfo("HTTPS://u:pw@h") == "HTTPS://***@h");
  CHECK(withoutUserinfo("u:pw@h:1") == "***@h:1");
  CHECK(withoutUserinfo("http://u:p@w@h") == "http://***@h");
  CHECK(withoutUserinfo("http://u:p/w@h/x") == "http://***@h/x");
  CHECK(withoutUserinfo("u:a://b@h") == "***@h");        // "u:a" is no scheme
  CHECK(withoutUserinfo("a,http://u:pw@h") == "***@h");  // a list: all of it up to the '@'
  CHECK(withoutUserinfo("h:2379") == "h:2379");
  CHECK(withoutUserinfo("") == "");
}

TEST_CASE("a key in a message is quoted, escaped and cut", "[common]") {
  // Whoever reaches a store without a token names its keys: a name must not end a log line and
  // start a forged one, nor reach a terminal as an escape sequence.
  const std::string line =
      "[2026-01-01 00:00:00.000] [ddprun] [info] every worker of every node exited 0";
  CHECK(shownKey("/x\n" + line + "\x1b]0;owned\x07\x1b[2J") ==
        "'/x\\n" + line + "\\x1b]0;owned\\x07\\x1b[2J'");
  CHECK(shownKey("/ddprun/run/node/1") == "'/ddprun/run/node/1'");
  const std::string shown = shownKey(std::string(8192, '\x1b'));
  CHECK(shown.starts_with("'\\x1b\\x1b"));
  CHECK(shown.ends_with("'... (8192 bytes)"));
  CHECK(shown.size() == 2 + 4 * kShownBytes + std::string("... (8192 bytes)").size());
}

TEST_CASE("parsePort: 0..65535 as 1 to 5 digits, nothing else", "[common]") {
  CHECK(parsePort("0") == 0);
  CHECK(parsePort("29500") == 29500);
  CHECK(parsePort("65535") == 65535);
  CHECK(parsePort("00080") == 80);
  for (const char* bad : {"", "65536", "99999", "123456", "-1", "+1", " 80", "80 ", "8o", "0x50"}) {
    INFO(bad);
    CHECK_FALSE(parsePort(bad));
  }
}

TEST_CASE("isLoopbackAddress: names, literals and resolved addresses agree", "[common]") {
  for (const char* yes : {"localhost", "127.0.0.1", "127.1.2.3", "::1"})
    CHECK(isLoopbackAddress(std::string(yes)));
  for (const char* no :
       {"0.0.0.0", "10.0.0.1", "::", "::ffff:127.0.0.1", "example.com", "127.foo"}) {
    INFO(no);
    CHECK_FALSE(isLoopbackAddress(std::string(no)));
  }
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.1.1", &v4.sin_addr);
  CHECK(isLoopbackAddress(reinterpret_cast<const sockaddr&>(v4)));
  ::inet_pton(AF_INET, "192.168.1.1", &v4.sin_addr);
  CHECK_FALSE(isLoopbackAddress(reinterpret_cast<const sockaddr&>(v4)));
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr = in6addr_loopback;
  CHECK(isLoopbackAddress(reinterpret_cast<const sockaddr&>(v6)));
  v6.sin6_addr = in6addr_any;
  CHECK_FALSE(isLoopbackAddress(reinterpret_cast<const sockaddr&>(v6)));
}
