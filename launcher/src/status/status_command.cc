#include "status/status_command.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/rendezvous_options.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/errors.h"
#include "membership/membership_keys.h"
#include "membership/status_publisher.h"
#include "membership/store_backends.h"
#include "status/job_status.h"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using common::printable;

// A status call that cannot reach the store gives up within a few seconds, saying so; each read
// after that is bounded too.
constexpr std::chrono::milliseconds kConnectTimeout = 3s;
constexpr std::chrono::milliseconds kCallTimeout = 5s;

constexpr const char* kUsage =
    "usage: ddprun status --rdzv-endpoint HOST:PORT --rdzv-id ID [--rdzv-backend c10d|etcd]\n"
    "                     [--rdzv-conf token_file=...,tls_cert=...,...] [--json]\n"
    "\n"
    "What a running job is doing, read from its rendezvous: its round, restarts, each node and\n"
    "worker (pid, state, start, last heartbeat), and the last failure. Read-only. The same\n"
    "--rdzv-* options (and PET_RDZV_* variables) as the job's agents.\n"
    "\n"
    "exit codes: 0 shown (the job runs), 4 shown (the job has ended), 3 no such job at the\n"
    "endpoint, 1 the store failed while being read, 2 bad input\n";

struct StatusArguments {
  bool json = false;
  bool help = false;
  std::vector<std::string> rendezvous;  // everything else: the rendezvous options
};

StatusArguments splitOwnFlags(const std::vector<std::string>& args) {
  StatusArguments result;
  for (const std::string& arg : args) {
    if (arg == "--json") {
      result.json = true;
    } else if (arg == "--help" || arg == "-h") {
      result.help = true;
    } else {
      result.rendezvous.push_back(arg);
    }
  }
  return result;
}

double epochNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A failure that ends the command with `code` and one line.
struct Refusal {
  int code;
  std::string line;
};

// Every node's snapshot under the run, read with one listing and one get per node.
JobStatus readJob(rendezvous::Store& store, const RendezvousConfig& rdzv) {
  const MembershipKeys keys(rdzv.runId);
  const auto listed = store.listPrefix(keys.statusPrefix(), rendezvous::Store::kMaxListedKeys);
  std::vector<AgentSnapshot> nodes;
  std::vector<std::string> unreadable;
  for (const std::string& key : listed.keys) {
    std::string text;
    try {
      if (!store.check({key})) continue;  // deleted since the listing (a node that rejoined)
      text = store.get(key);
    } catch (const rendezvous::StoreTimeoutError&) {
      continue;  // deleted since the listing (a node that rejoined under a new id)
    }
    if (text.size() > kMaxSnapshotBytes) {
      unreadable.push_back(key);
      continue;
    }
    try {
      nodes.push_back(agentSnapshotFromJson(nlohmann::json::parse(text)));
    } catch (const std::exception&) {  // not JSON, or not a snapshot: another version's
      unreadable.push_back(key);
    }
  }
  JobStatus status = jobStatusOf(rdzv.runId, std::move(nodes));
  status.unreadable = std::move(unreadable);
  return status;
}

int runStatus(const std::vector<std::string>& args, const Subcommand::Environment& environment) {
  const StatusArguments given = splitOwnFlags(args);
  if (given.help) {
    std::fputs(kUsage, stdout);
    return kStatusShown;
  }
  const CommandLine parsed = parseRendezvousOptions("ddprun status", given.rendezvous, environment);
  // parsed.notes say what a job does unlike torchrun's: nothing a read of its status needs.
  for (const std::string& warning : parsed.warnings) {
    std::fprintf(stderr, "ddprun: warning: %s\n", warning.c_str());
  }
  const RendezvousConfig& rdzv = parsed.config.rdzv;
  std::unique_ptr<StoreBackend> backend;
  try {
    rendezvous::TcpStoreOptions store = rendezvousStoreOptions(rdzv, loadRendezvousSecurity(rdzv.settings));
    // Nothing this command reads is larger (a snapshot is at most kMaxSnapshotBytes, a listing
    // kMaxListedBytes): a store that answers with more is refused, not buffered.
    store.maxReplyValueBytes = rendezvous::Store::kMaxListedBytes;
    backend = makeStoreBackend(rdzv, {std::move(store)});
  } catch (const StoreBackendError& error) {
    throw UsageError(error.what());
  }

  const auto refuse = [](const Refusal& refusal) {
    std::fprintf(stderr, "ddprun: error: status: %s\n", refusal.line.c_str());
    return refusal.code;
  };
  const std::string where = backend->address();
  JobStatus status;
  try {
    const auto store = backend->connect(kCallTimeout, kConnectTimeout);
    status = readJob(*store, rdzv);
  } catch (const rendezvous::StoreAuthError& error) {
    // The job's store, but this command's token or TLS files are not the job's: the line says
    // which option to give, as it does to an agent.
    return refuse({kStatusBadInput, printable(error.what())});
  } catch (const rendezvous::StoreHandshakeError& error) {
    return refuse({kStatusNoJob, fmt::format("no rendezvous store answers at {}: {}; check --rdzv-endpoint",
                                             printable(where), printable(error.what()))});
  } catch (const rendezvous::StoreConnectionError& error) {
    // An agent-hosted store ends with its job: say so, as that is the likely case after a run.
    const char* hosted = rdzv.backend == RdzvBackend::kEtcd
                             ? ""
                             : " (or the job has ended: the store its agent hosted ended with it)";
    return refuse({kStatusNoJob, fmt::format("no job at {}: nothing answered within {} s ({}); check "
                                             "--rdzv-endpoint{}",
                                             printable(where), kConnectTimeout.count() / 1000,
                                             printable(error.what()), hosted)});
  } catch (const rendezvous::StoreError& error) {
    return refuse({kStatusStoreFailed, fmt::format("the rendezvous store at {} failed while being read: {}",
                                                   printable(where), printable(error.what()))});
  }
  if (status.nodes.empty() && status.unreadable.empty()) {
    return refuse({kStatusNoJob,
                   fmt::format("no job '{}' at {}: no node of that run id has published its status; "
                               "check --rdzv-id (agents publish once they have joined)",
                               printable(rdzv.runId), printable(where))});
  }
  const double now = epochNow();
  if (given.json) {
    const std::string text =
        renderJson(status, now).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    std::fputs(renderText(status, now).c_str(), stdout);
  }
  std::fflush(stdout);
  return ended(status) ? kStatusEnded : kStatusShown;
}

}  // namespace

Subcommand statusSubcommand() {
  return {"status", "what a running job is doing, read from its rendezvous (ddprun status --help)",
          runStatus};
}

}  // namespace ddprun::launcher
