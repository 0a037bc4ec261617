// The pure parts of a launch over ssh (launcher/src/hosts, docs/ssh.md): hostfile lines good and
// bad (DeepSpeed's format), --hosts lists, --include/--exclude in DeepSpeed's syntax, the remote
// command's quoting (what a POSIX shell reads back must be the argument list, byte for byte), the
// forwarded variables and the ssh client's argv. The command line's side (cli/ssh_launch_options)
// is in cli_test.cc.
#include "hosts/host_list.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hosts/ssh_command.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher::hosts;
using Catch::Matchers::Contains;

std::string errorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const HostListError& error) {
    return error.what();
  }
  return "";
}

std::vector<std::string> namesOf(const std::vector<SelectedHost>& hosts) {
  std::vector<std::string> names;
  for (const auto& host : hosts) names.push_back(host.name);
  return names;
}

// What `shell -c script` prints; the shell must exit 0.
std::string shellOutput(const std::string& shell, const std::string& script) {
  FILE* pipe = ::popen((shell + " -c " + shellQuote(script)).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  REQUIRE(::pclose(pipe) == 0);
  return out;
}

// What /bin/sh makes of `text`: each word it reads, one per line (printf '%s\n').
std::vector<std::string> shellWords(const std::string& text) {
  const std::string out = shellOutput("/bin/sh", "printf '%s\\n' " + text);
  std::vector<std::string> words;
  std::size_t start = 0;
  for (std::size_t newline; (newline = out.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    words.push_back(out.substr(start, newline - start));
  }
  return words;
}

}  // namespace

TEST_CASE("a hostfile in DeepSpeed's format: HOST slots=N, comments, blank lines") {
  const auto hosts = parseHostfile(
      "# the cluster\n"
      "worker-0 slots=8\n"
      "\n"
      "   worker-1\tslots=4   # half a node\n"
      "10.0.0.3 slots=1\r\n",
      "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "worker-0");
  CHECK(hosts[0].slots == 8);
  CHECK(hosts[1].name == "worker-1");
  CHECK(hosts[1].slots == 4);
  CHECK(hosts[2].name == "10.0.0.3");
  CHECK(hosts[2].slots == 1);
}

TEST_CASE("a bad hostfile line is one error naming the file and line") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a slots=2\nb\n", "hf:2: no slots=N"},
      {"a slots=2\nb slots=x\n", "hf:2: slots must be a whole number >= 1"},
      {"a slots=0\n", "hf:1: slots must be a whole number >= 1"},
      {"a slots=-1\n", "hf:1: slots must be a whole number >= 1"},
      {"a slots=99999999\n", "hf:1: slots must be a whole number >= 1"},
      {"a gpus=2\n", "hf:1: slots must be a whole number >= 1"},
      {"a slots=2 extra\n", "hf:1: more than 'HOST slots=N'"},
      {"a slots=2\n\na slots=4\n", "hf:3: host a is listed already on line 1"},
      {"-oProxyCommand=x slots=1\n", "is not a host name"},
      {"# only comments\n\n", "lists no host"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    const std::string error = errorOf([&] { parseHostfile(text, "hf"); });
    CHECK_THAT(error, Contains(expected));
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("a --hosts list: names in order, and empty, repeated or option-like names are errors") {
  const auto hosts = parseHostList("n1,n2,10.0.0.7", "--hosts");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[2].name == "10.0.0.7");
  CHECK(hosts[0].slots == 0);
  CHECK_THAT(errorOf([] { parseHostList("n1,,n2", "--hosts"); }), Contains("an empty name"));
  CHECK_THAT(errorOf([] { parseHostList("", "--hosts"); }), Contains("an empty name"));
  CHECK_THAT(errorOf([] { parseHostList("n1,n1", "--hosts"); }), Contains("listed twice"));
  CHECK_THAT(errorOf([] { parseHostList("-oProxyCommand=sh", "--hosts"); }),
             Contains("is not a host name"));
  CHECK_THAT(errorOf([] { parseHostList("a b", "--hosts"); }), Contains("is not a host name"));
}

TEST_CASE("include: only the hosts named, with the slots listed where listed") {
  const std::vector<ListedHost> listed = {{"w0", 4}, {"w1", 4}, {"w2", 4}};
  const auto hosts = selectHosts(listed, SelectionKind::kInclude, "w2@w0:0,2", "--include");
  // The hostfile's order, not the spec's: the first host listed stays the store's host.
  CHECK(namesOf(hosts) == std::vector<std::string>{"w0", "w2"});
  REQUIRE(hosts[0].devices);
  CHECK(*hosts[0].devices == std::vector<int>{0, 2});
  CHECK_FALSE(hosts[1].devices);
}

TEST_CASE("exclude: every host but those named, and without the slots listed") {
  const std::vector<ListedHost> listed = {{"w0", 4}, {"w1", 2}, {"w2", 4}};
  const auto hosts = selectHosts(listed, SelectionKind::kExclude, "w1@w2:0,3", "--exclude");
  CHECK(namesOf(hosts) == std::vector<std::string>{"w0", "w2"});
  CHECK_FALSE(hosts[0].devices);
  REQUIRE(hosts[1].devices);
  CHECK(*hosts[1].devices == std::vector<int>{1, 2});
  // Every slot of a host excluded: the host is gone.
  CHECK(namesOf(selectHosts(listed, SelectionKind::kExclude, "w1:0,1", "--exclude")) ==
        std::vector<std::string>{"w0", "w2"});
}

TEST_CASE("include and exclude: unknown hosts, bad slots and empty results are errors") {
  const std::vector<ListedHost> listed = {{"w0", 2}, {"w1", 2}};
  const std::vector<ListedHost> unknownSlots = {{"w0", 0}, {"w1", 0}};
  const auto include = SelectionKind::kInclude;
  const auto exclude = SelectionKind::kExclude;
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w9", "--include"); }),
             Contains("unknown host w9"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w0:2", "--include"); }),
             Contains("host w0 has slots 0..1 (slots=2)"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w0:a", "--include"); }),
             Contains("w0:a: a is not a slot number"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w0:", "--include"); }),
             Contains("is not a slot number"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w0@w0", "--include"); }),
             Contains("named twice"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, include, "w0@", "--include"); }),
             Contains("an empty host name"));
  CHECK_THAT(errorOf([&] { selectHosts(listed, exclude, "w0@w1", "--exclude"); }),
             Contains("no host is left"));
  // --hosts gives no slot counts: a slot may be included (it becomes CUDA_VISIBLE_DEVICES), but
  // excluding one means knowing the others.
  CHECK(*selectHosts(unknownSlots, include, "w1:3", "--include")[0].devices == std::vector<int>{3});
  CHECK_THAT(errorOf([&] { selectHosts(unknownSlots, exclude, "w1:3", "--exclude"); }),
             Contains("give a hostfile with slots=N"));
}

TEST_CASE("shellQuote: the shell reads back every argument byte for byte") {
  const std::vector<std::string> words = {"plain",    "two words", "it's",       "'",         "''",
                                          "$HOME",    "`id`",      "$(id)",      "a\\b",      "*",
                                          "--lr=0.1", "\"q\"",     "semi;colon", "new\tline", ""};
  std::string text;
  for (const auto& word : words) text += shellQuote(word) + " ";
  CHECK(shellWords(text) == words);
}

TEST_CASE("forwarded variables: NCCL_*, PYTHON*, CUDA_VISIBLE_DEVICES and the names listed") {
  const std::map<std::string, std::string> environment = {
      {"NCCL_DEBUG", "INFO"}, {"PYTHONPATH", "/src"}, {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"HOME", "/root"},      {"WANDB_KEY", "k"},     {"PATH", "/bin"}};
  const auto forwarded = forwardedEnvironment(environment, {"WANDB_KEY", "NOT_SET"});
  CHECK(forwarded == std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "0,1"},
                                                        {"NCCL_DEBUG", "INFO"},
                                                        {"PYTHONPATH", "/src"},
                                                        {"WANDB_KEY", "k"}});
  CHECK(isVariableName("A_1"));
  CHECK_FALSE(isVariableName("1A"));
  CHECK_FALSE(isVariableName("A-B"));
  CHECK_FALSE(isVariableName(""));
}

TEST_CASE("the remote command: cd, the exports, ddprun's rendezvous flags, then the job's words") {
  SshLaunch launch;
  launch.agents = {{"n1", "2", std::nullopt}, {"n2", "1", std::string("3")}};
  launch.rdzvEndpoint = "n1:29400";
  launch.runId = "ssh-abc";
  launch.agentArguments = {"--max-restarts=1", "--", "train.py", "--name", "it's mine"};
  launch.environment = {{"NCCL_DEBUG", "INFO"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  launch.sshProgram = "/usr/bin/ssh";
  launch.sshOptions = {"-i", "/k ey"};
  launch.remoteProgram = "/opt/dd prun";
  launch.remoteDirectory = "/home/me/my job";

  // The shell's own words first (quoted where they are the user's), then the command it execs.
  const std::string command = remoteCommand(launch, 0);
  const std::string start =
      "cd '/home/me/my job' && export CUDA_VISIBLE_DEVICES='0,1' NCCL_DEBUG='INFO' && exec ";
  REQUIRE(command.starts_with(start));
  const std::vector<std::string> first = shellWords(command.substr(start.size()));
  const std::vector<std::string> expected = {"/opt/dd prun",
                                             "--stop-on-stdin-eof",
                                             "--nnodes=2",
                                             "--nproc-per-node=2",
                                             "--rdzv-backend=c10d",
                                             "--rdzv-endpoint=n1:29400",
                                             "--rdzv-id=ssh-abc",
                                             "--max-restarts=1",
                                             "--",
                                             "train.py",
                                             "--name",
                                             "it's mine"};
  CHECK(first == expected);
  // Host 2's selected slot replaces the forwarded CUDA_VISIBLE_DEVICES.
  const std::string second = remoteCommand(launch, 1);
  CHECK_THAT(second, Contains(" CUDA_VISIBLE_DEVICES='3' "));
  CHECK_THAT(second, Contains("'--nproc-per-node=1'"));

  const auto argv = sshArgv(launch, 1);
  REQUIRE(argv.size() > 6);
  CHECK(argv[0] == "/usr/bin/ssh");
  CHECK(argv[1] == "-i");  // the user's options first: ssh keeps the first value it reads
  CHECK(argv[2] == "/k ey");
  CHECK(std::find(argv.begin(), argv.end(), "BatchMode=yes") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "ConnectTimeout=10") != argv.end());
  CHECK(argv[argv.size() - 3] == "--");  // a host name is never read as an option
  CHECK(argv[argv.size() - 2] == "n2");
  CHECK(argv.back() == second);
}

TEST_CASE("the remote command without variables to set: cd, then exec") {
  SshLaunch launch;
  launch.agents = {{"n1", "1", std::nullopt}};
  launch.remoteProgram = "/opt/ddprun";
  launch.remoteDirectory = "/w";
  CHECK_THAT(remoteCommand(launch, 0),
             Catch::Matchers::StartsWith("cd '/w' && exec '/opt/ddprun' "));
}

// The remote command as a POSIX shell runs it, here: ddprun is a stand-in script under a
// directory whose name holds '=' (which `env` would take for an assignment), printing the
// variables it was given and its arguments.
TEST_CASE("the remote command runs a ddprun whose path holds '=', its variables set, sh and bash") {
  const ddprun::test::TempDir scratch;
  const std::filesystem::path bin = std::filesystem::path(scratch.path) / "opt=1 it's" / "ddprun";
  std::filesystem::create_directories(bin.parent_path());
  {
    std::ofstream script(bin);
    script << "#!/bin/sh\nprintf '%s\\n' \"$PWD\" \"$NCCL_DEBUG\" \"$WANDB_NOTE\" \"$@\"\n";
  }
  std::filesystem::permissions(bin, std::filesystem::perms::owner_all);
  SshLaunch launch;
  launch.agents = {{"n1", "1", std::nullopt}};
  launch.rdzvEndpoint = "n1:29400";
  launch.runId = "r";
  launch.agentArguments = {"--", "train.py", "a=b"};
  launch.environment = {{"NCCL_DEBUG", "INFO"}, {"WANDB_NOTE", "x='1' $HOME `id`"}};
  launch.remoteProgram = bin.string();
  launch.remoteDirectory = scratch.path;
  const std::string command = remoteCommand(launch, 0);
  for (const std::string shell : {"/bin/sh", "/bin/bash"}) {
    INFO(shell << " ran: " << command);
    CHECK(shellOutput(shell, command) ==
          scratch.path +
              "\nINFO\nx='1' $HOME `id`\n--stop-on-stdin-eof\n--nnodes=1\n"
              "--nproc-per-node=1\n--rdzv-backend=c10d\n"
              "--rdzv-endpoint=n1:29400\n--rdzv-id=r\n--\ntrain.py\na=b\n");
  }
}

TEST_CASE("a launch's own token: --token-from-stdin on the remote command, the token on no argv") {
  SshLaunch launch;
  launch.agents = {{"n1", "1", std::nullopt}, {"n2", "1", std::nullopt}};
  launch.rdzvEndpoint = "n1:29400";
  launch.runId = "r";
  launch.agentArguments = {"--", "train.py"};
  launch.sshProgram = "/usr/bin/ssh";
  launch.remoteProgram = "/opt/ddprun";
  launch.remoteDirectory = "/w";
  CHECK_THAT(remoteCommand(launch, 0), !Contains("token"));
  launch.token = std::string(64, 'f');
  for (std::size_t i = 0; i < launch.agents.size(); ++i) {
    CHECK_THAT(remoteCommand(launch, i), Contains(" '--token-from-stdin' "));
    for (const std::string& word : sshArgv(launch, i)) CHECK_THAT(word, !Contains("ffffffff"));
  }
}
