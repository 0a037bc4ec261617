// The command line of a launch over ssh (cli/ssh_launch_options.h, docs/ssh.md): what
// `ddprun --hosts ... train.py` decides for every host (the rendezvous, the workers per host, the
// job's own options as each agent gets them) and the inputs it refuses, each one line.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;
using Environment = std::map<std::string, std::string>;

// A scratch directory with train.py and hostfiles, removed at exit.
struct Scratch {
  ddprun::test::TempDir temp;
  fs::path dir = temp.path;
  Scratch() {
    ddprun::test::writeFile(dir / "train.py", "print('hi')\n");
    // The ssh client is looked up on PATH; a stand-in is enough, nothing runs it here.
    ddprun::test::writeFile(dir / "bin" / "ssh", "#!/bin/sh\nexit 255\n", 0700);
  }
  std::string file(const std::string& name, const std::string& text) const {
    return ddprun::test::writeFile(dir / name, text);
  }
};

const Scratch& scratch() {
  static const Scratch instance;
  return instance;
}

Environment environment() {
  return {{"PATH", (scratch().dir / "bin").string()}, {"PYTHON_EXEC", "/usr/bin/python3"}};
}

CommandLine parse(std::vector<std::string> args, const Environment& env = environment()) {
  std::vector<const char*> argv{"ddprun"};
  for (const auto& arg : args) argv.push_back(arg.c_str());
  return parseCommandLine(static_cast<int>(argv.size()), argv.data(), env);
}

std::string usageError(std::vector<std::string> args, const Environment& env = environment()) {
  try {
    parse(std::move(args), env);
  } catch (const UsageError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("no UsageError");
  return {};
}

std::string train() { return (scratch().dir / "train.py").string(); }

}  // namespace

TEST_CASE(
    "a --hosts launch: c10d on the first host, a generated run id, the job's words for every "
    "host") {
  const CommandLine line =
      parse({"--hosts", "n1,n2", "--nproc-per-node", "2", "--max-restarts=3", "--forward-env",
             "WANDB_KEY", train(), "--lr", "0.1", "--hosts", "x"},
            [] {
              auto env = environment();
              env["WANDB_KEY"] = "k";
              env["NCCL_DEBUG"] = "INFO";
              env["HOME"] = "/root";
              return env;
            }());
  REQUIRE(line.sshLaunch);
  const hosts::SshLaunch& launch = *line.sshLaunch;
  REQUIRE(launch.agents.size() == 2);
  CHECK(launch.agents[0].host == "n1");
  CHECK(launch.agents[1].nprocPerNode == "2");
  CHECK(launch.rdzvEndpoint == "n1:29400");
  CHECK_THAT(launch.runId, StartsWith("ssh-"));
  CHECK(launch.runId.size() > 10);
  // The job's options (each --name=value), then the script and its arguments untouched: the
  // script's own "--hosts x" is its own.
  CHECK(launch.agentArguments ==
        std::vector<std::string>{"--max-restarts=3", "--", train(), "--lr", "0.1", "--hosts", "x"});
  CHECK(launch.environment.contains("WANDB_KEY"));
  CHECK(launch.environment.contains("NCCL_DEBUG"));
  CHECK(launch.environment.contains("PYTHON_EXEC"));
  CHECK_FALSE(launch.environment.contains("HOME"));
  CHECK(launch.sshProgram == (scratch().dir / "bin" / "ssh").string());
  CHECK(launch.remoteDirectory == fs::current_path().string());
}

TEST_CASE("a --hostfile launch: slots are the workers per host unless --nproc-per-node is given") {
  const std::string hostfile = scratch().file("hf", "a slots=4\nb slots=2\nc slots=8\n");
  const auto plain = parse({"--hostfile", hostfile, train()});
  REQUIRE(plain.sshLaunch);
  CHECK(plain.sshLaunch->agents[0].nprocPerNode == "4");
  CHECK(plain.sshLaunch->agents[1].nprocPerNode == "2");
  const auto given = parse({"--hostfile", hostfile, "--nproc-per-node", "gpu", train()});
  CHECK(given.sshLaunch->agents[1].nprocPerNode == "gpu");  // resolved on each host
  const auto included = parse({"--hostfile", hostfile, "--include", "c:1,5@a", train()});
  REQUIRE(included.sshLaunch->agents.size() == 2);
  CHECK(included.sshLaunch->agents[0].host == "a");
  CHECK(included.sshLaunch->agents[1].nprocPerNode == "2");
  CHECK(included.sshLaunch->agents[1].cudaVisibleDevices == "1,5");
  const auto endpoint = parse({"--hostfile", hostfile, "--master-addr", "10.0.0.9", "--master-port",
                               "1234", "--rdzv-id", "job7", train()});
  CHECK(endpoint.sshLaunch->rdzvEndpoint == "10.0.0.9:1234");
  CHECK(endpoint.sshLaunch->runId == "job7");
  const auto options = parse({"--hosts", "a", "--ssh-options=-p 2222  -i key", train()}, [] {
    auto env = environment();
    env["DDPRUN_SSH_OPTIONS"] = "-p 1";
    env["DDPRUN_REMOTE_BIN"] = "/opt/ddprun";
    return env;
  }());
  CHECK(options.sshLaunch->sshOptions == std::vector<std::string>{"-p", "2222", "-i", "key"});
  CHECK(options.sshLaunch->remoteProgram == "/opt/ddprun");
}

TEST_CASE("a launch over ssh refuses what it cannot honour, in one line") {
  const std::string hostfile = scratch().file("hf2", "a slots=2\nb slots=2\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--include", "a", train()}, "--include belongs to a launch over ssh"},
      {{"--hosts", "a,b", "--hostfile", hostfile, train()}, "both name the hosts"},
      {{"--hostfile", hostfile, "--include", "a", "--exclude", "b", train()},
       "cannot be used together"},
      {{"--hostfile", hostfile, "--include", "z", train()}, "unknown host z"},
      {{"--hosts", "a,b", "--nnodes", "3", train()}, "the number of hosts (2)"},
      {{"--hosts", "a,b", "--standalone", train()}, "--standalone does not go with --hosts"},
      {{"--hosts", "a,b", "--node-rank", "1", train()}, "--node-rank does not go with"},
      {{"--hosts", "a,b", "--local-addr", "a", train()}, "it would be every host's address"},
      {{"--hosts", "a,b", "--rdzv-backend", "static", train()}, "uses the c10d backend"},
      {{"--hosts", "a", "--forward-env", "A-B", train()}, "is not a variable name"},
      {{"--hosts", "a", "--stop-on-stdin-eof", train()}, "is set by --hosts"},
      {{"--hosts", "a", "--token-from-stdin", train()}, "--token-from-stdin is set by --hosts"},
      {{"--hostfile", scratch().file("bad", "a slots=2\nb\n"), train()}, "bad:2: no slots=N"},
      {{"--hostfile", (scratch().dir / "missing").string(), train()}, "cannot read it"},
      {{"--hosts", "a", "--max-restarts", "-1", train()}, "restarts cannot be negative"},
      {{"--hosts", "a", "--rdzv-id", "P/x", train()}, "--rdzv-id 'P/x': a run id is 1..128 of"},
      {{"--hosts", "a"}, "missing the training script"},
  };
  CHECK_THAT(usageError({"--hosts", "a", train()},
                        {{"PATH", "/nonexistent"}, {"PYTHON_EXEC", "/usr/bin/python3"}}),
             Contains("ssh is not on PATH"));
  for (const auto& [args, expected] : cases) {
    INFO(Catch::Detail::stringify(args));
    CHECK_THAT(usageError(args), Contains(expected));
  }
  CHECK(parse({"--hosts", "a,b", "--nnodes", "2", train()}).sshLaunch);
  CHECK(parse({"--hosts", "a,b", "--rdzv-backend", "c10d", train()}).sshLaunch);
}

TEST_CASE("the remote agent's --stop-on-stdin-eof reaches the agent's config") {
  CHECK(parse({"--stop-on-stdin-eof", train()}).config.stopOnStdinEof);
  CHECK_FALSE(parse({train()}).config.stopOnStdinEof);
  CHECK_FALSE(parse({train()}).sshLaunch);
}

TEST_CASE("a --hosts launch without a token file makes a token of its own, on no command line") {
  const auto first = parse({"--hosts", "a,b", train()});
  const auto second = parse({"--hosts", "a,b", train()});
  REQUIRE(first.sshLaunch->token);
  REQUIRE(second.sshLaunch->token);
  const std::string& token = *first.sshLaunch->token;
  CHECK(token.size() == 64);  // 32 random bytes as hex, `openssl rand -hex 32`
  CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(token != *second.sshLaunch->token);
  for (const auto& word : first.sshLaunch->agentArguments) CHECK_THAT(word, !Contains(token));
}

TEST_CASE("a --hosts launch with the user's token file makes none: each agent reads that file") {
  const std::string tokenFile = scratch().file("token", std::string(64, '7') + "\n");
  fs::permissions(tokenFile, fs::perms::owner_read | fs::perms::owner_write);
  const auto given = parse({"--hosts", "a,b", "--rdzv-conf", "token_file=" + tokenFile, train()});
  CHECK_FALSE(given.sshLaunch->token);
  CHECK(given.sshLaunch->agentArguments.front() == "--rdzv-conf=token_file=" + tokenFile);
  const auto fromEnvironment = parse({"--hosts", "a,b", train()}, [&] {
    auto env = environment();
    env["PET_RDZV_CONF"] = "token_file=" + tokenFile;
    return env;
  }());
  CHECK_FALSE(fromEnvironment.sshLaunch->token);
  CHECK(fromEnvironment.sshLaunch->agentArguments.front() == "--rdzv-conf=token_file=" + tokenFile);
}

TEST_CASE("the remote agent's --token-from-stdin reaches its config, and not beside a token file") {
  CHECK(parse({"--token-from-stdin", train()}).config.tokenFromStdin);
  CHECK_FALSE(parse({train()}).config.tokenFromStdin);
  CHECK_THAT(usageError({"--token-from-stdin", "--rdzv-conf", "token_file=/t", train()}),
             Contains("--token-from-stdin and --rdzv-conf token_file both give the job's token"));
}

TEST_CASE("the ssh launch's options leave torchrun's unique prefixes as they were") {
  // argparse takes a unique prefix: --re was --redirects in torchrun (one spelling, no dash), and
  // must stay so beside --hosts, --ssh-ddprun, --exclude and the others.
  const LaunchConfig config = parse({"--re", "3", train()}).config;
  CHECK(config.logs.redirects != LaunchConfig{}.logs.redirects);
}
