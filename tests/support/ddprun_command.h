// ddprun command lines for tests that run the launcher, and the workers those tests give it.
// Header-only: the binary's path comes from DDPRUN_BIN, which only the launcher and runtime test
// targets define.
#pragma once

#include <string>
#include <vector>

#ifndef DDPRUN_BIN
#error "ddprun_command.h needs DDPRUN_BIN (the ddprun binary's path) defined by the test target"
#endif

namespace ddprun::test {

// `ddprun args...`
inline std::vector<std::string> ddprunCommand(std::vector<std::string> args) {
  args.insert(args.begin(), DDPRUN_BIN);
  return args;
}

// `ddprun --standalone --nproc-per-node N rest...`
inline std::vector<std::string> ddprunCommand(int nproc, const std::vector<std::string>& rest) {
  std::vector<std::string> args{"--standalone", "--nproc-per-node", std::to_string(nproc)};
  args.insert(args.end(), rest.begin(), rest.end());
  return ddprunCommand(std::move(args));
}

// One node of a c10d job: `ddprun --nnodes NNODES --nproc-per-node NPROC --rdzv-backend c10d
// --rdzv-endpoint ENDPOINT --rdzv-id ID rest...` (NNODES: "N" or "MIN:MAX").
inline std::vector<std::string> c10dCommand(const std::string& nnodes, int nproc,
                                            const std::string& endpoint, const std::string& id,
                                            const std::vector<std::string>& rest) {
  std::vector<std::string> args{"--nnodes",       nnodes, "--nproc-per-node", std::to_string(nproc),
                                "--rdzv-backend", "c10d", "--rdzv-endpoint",  endpoint,
                                "--rdzv-id",      id};
  args.insert(args.end(), rest.begin(), rest.end());
  return ddprunCommand(std::move(args));
}

// One node of a static job on 127.0.0.1: `ddprun --nnodes NNODES --nproc-per-node NPROC
// --node-rank RANK --master-addr 127.0.0.1 --master-port PORT rest...`
inline std::vector<std::string> staticCommand(int nnodes, int nproc, int nodeRank, int port,
                                              const std::vector<std::string>& rest) {
  std::vector<std::string> args{
      "--nnodes",      std::to_string(nnodes),   "--nproc-per-node", std::to_string(nproc),
      "--node-rank",   std::to_string(nodeRank), "--master-addr",    "127.0.0.1",
      "--master-port", std::to_string(port)};
  args.insert(args.end(), rest.begin(), rest.end());
  return ddprunCommand(std::move(args));
}

#ifdef DDPRUN_SOURCE_DIR
// A worker script of tests/launcher/workers (report.sh, stubborn.sh).
inline std::string launcherWorker(const std::string& name) {
  return std::string(DDPRUN_SOURCE_DIR) + "/tests/launcher/workers/" + name;
}
#endif

}  // namespace ddprun::test
