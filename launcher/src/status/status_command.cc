#include "status/status_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "cli/rendezvous_options.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/errors.h"
#include "membership/membership_keys.h"
#include "membership/status_publisher.h"
#include "status/job_status.h"
#include "stores/hosting_policy.h"
#include "stores/store_backends.h"

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
    "                     [--watch[=SECONDS]]\n"
    "\n"
    "What a running job is doing, read from its rendezvous: its round, restarts, each node and\n"
    "worker (pid, state, start, last heartbeat), the last failure and the incidents (each\n"
    "failure's timeline: detected, decided, running again, first progress, seconds lost).\n"
    "Read-only. The same --rdzv-* options (and PET_RDZV_* variables) as the job's agents.\n"
    "--watch redraws it every SECONDS (2) on one screen until the job ends (Ctrl-C stops it);\n"
    "with --json, one JSON line each time.\n"
    "\n"
    "exit codes: 0 shown (the job runs), 4 shown (the job has ended), 3 no such job at the\n"
    "endpoint, 1 the store failed while being read, 2 bad input\n";

// --watch's default interval, and the shortest one taken: a read costs the store one listing and
// one read per node, so a person's refresh rate is far from any load.
constexpr std::chrono::milliseconds kWatchInterval = 2s;
constexpr double kShortestWatch = 0.2;
constexpr std::string_view kWatchFlag = "--watch";

struct StatusArguments {
  bool json = false;
  bool help = false;
  std::optional<std::chrono::milliseconds> watch;  // --watch: redraw every so often
  std::vector<std::string> rendezvous;             // everything else: the rendezvous options
};

std::chrono::milliseconds watchInterval(std::string_view text) {
  double seconds = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (error != std::errc() || end != text.data() + text.size() || !(seconds >= kShortestWatch) ||
      seconds > 3600) {
    throw UsageError(fmt::format(
        "--watch={} is not a number of seconds; give one from {} to 3600, e.g. --watch=5",
        printable(text), kShortestWatch));
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

StatusArguments splitOwnFlags(const std::vector<std::string>& args) {
  StatusArguments result;
  for (const std::string& arg : args) {
    if (arg == kWatchFlag) {
      result.watch = kWatchInterval;
    } else if (arg.rfind(std::string(kWatchFlag) + "=", 0) == 0) {
      result.watch = watchInterval(std::string_view(arg).substr(kWatchFlag.size() + 1));
    } else if (arg == "--json") {
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

// A record's text as a count or round number (current_round), or none: status only reads, and a
// record it cannot read is left out rather than refused.
std::optional<int> number(const std::string& text) {
  int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// What the round records say (membership_keys.h): the current round, its joiners (a listing of
// its member slots), whether it formed (its close record: the members' count and the restarts),
// and how many nodes registered. None when there is no record of the run at all. Reads only:
// tryGet and listings, never the ticket counters (a count of a missing one creates it).
std::optional<RoundRecords> readRoundRecords(rendezvous::Store& store, const MembershipKeys& keys) {
  constexpr std::size_t kAll = rendezvous::Store::kMaxListedKeys;
  RoundRecords records;
  try {
    if (const auto text = store.tryGet(keys.currentRound())) records.round = number(*text);
  } catch (const rendezvous::StoreValueTooLargeError&) {
    // No agent writes that: not a round number, as any other text that is none.
  }
  if (records.round) {
    const auto members = store.listPrefix(keys.memberPrefix(*records.round), kAll);
    records.joined = members.keys.size();
    records.atLeast = members.more;
    std::optional<std::string> closed;
    try {
      closed = store.tryGet(keys.closed(*records.round));
    } catch (const rendezvous::StoreValueTooLargeError&) {
      closed = "";  // a close record listing its members (a large job's): formed, counted above
    }
    if (closed) {
      records.formed = true;
      const auto record = nlohmann::json::parse(*closed, nullptr, /*allow_exceptions=*/false);
      if (record.is_object()) {
        if (const auto restarts = record.find("restarts");
            restarts != record.end() && restarts->is_number_integer()) {
          records.restarts = restarts->get<int>();
        }
        if (const auto nodes = record.find("nodes");
            nodes != record.end() && nodes->is_number_unsigned()) {
          records.joined = nodes->get<std::size_t>();
          records.atLeast = false;
        } else if (const auto listed = record.find("members");
                   listed != record.end() && listed->is_array()) {
          records.joined = listed->size();
          records.atLeast = false;
        }
      }
    }
  }
  const auto nodes = store.listPrefix(keys.nodePrefix(), kAll);
  records.registered = nodes.keys.size();
  if (!records.round) records.atLeast = nodes.more;
  if (!records.round && records.registered == 0) return std::nullopt;
  return records;
}

}  // namespace

JobStatus readJob(rendezvous::Store& store, const std::string& runId) {
  const MembershipKeys keys(runId);
  const auto listed = store.listPrefix(keys.statusPrefix(), rendezvous::Store::kMaxListedKeys);
  std::vector<AgentSnapshot> nodes;
  std::vector<UnreadableKey> unreadable;
  for (const std::string& key : listed.keys) {
    std::optional<std::string> text;
    try {
      text = store.tryGet(key);
    } catch (const rendezvous::StoreValueTooLargeError& error) {
      unreadable.push_back({key, UnreadableKey::Why::kTooLarge, error.bytes()});
      continue;
    }
    if (!text) continue;  // deleted since the listing (a node that rejoined under a new id)
    if (text->size() > kMaxSnapshotBytes) {
      unreadable.push_back({key, UnreadableKey::Why::kTooLarge, text->size()});
      continue;
    }
    try {
      nodes.push_back(agentSnapshotFromJson(nlohmann::json::parse(*text)));
    } catch (const std::exception&) {  // not JSON, or not a snapshot: another version's
      unreadable.push_back({key, UnreadableKey::Why::kNotASnapshot, 0});
    }
  }
  JobStatus status = jobStatusOf(runId, std::move(nodes));
  status.unreadable = std::move(unreadable);
  if (status.nodes.empty()) status.records = readRoundRecords(store, keys);
  return status;
}

namespace {

// One read of the job and its rendering; the command's exit code.
int showOnce(StoreBackend& backend, const RendezvousConfig& rdzv, bool json) {
  const auto refuse = [](const Refusal& refusal) {
    std::fprintf(stderr, "ddprun: error: status: %s\n", refusal.line.c_str());
    return refusal.code;
  };
  const std::string where = backend.address();
  const auto failedWhileRead = [&](const rendezvous::StoreError& error) {
    return refuse(
        {kStatusStoreFailed, fmt::format("the rendezvous store at {} failed while being read: {}",
                                         printable(where), printable(error.what()))});
  };
  JobStatus status;
  try {
    const auto store = backend.connect(kCallTimeout, kConnectTimeout);
    status = readJob(*store, rdzv.runId);
  } catch (const rendezvous::StoreAuthError& error) {
    // The job's store, but this command's token or TLS files are not the job's: the line says
    // which option to give, as it does to an agent.
    return refuse({kStatusBadInput, printable(error.what())});
  } catch (const rendezvous::StoreHandshakeError& error) {
    return refuse(
        {kStatusNoJob, fmt::format("no rendezvous store answers at {}: {}; check --rdzv-endpoint",
                                   printable(where), printable(error.what()))});
  } catch (const rendezvous::StoreValueTooLargeError& error) {
    // A connection the client closed itself, on a reply it would not read: the store answers.
    return failedWhileRead(error);
  } catch (const rendezvous::StoreConnectionError& error) {
    // An agent-hosted store ends with its job: say so, as that is the likely case after a run.
    const char* hosted = storeHosting(rdzv.backend) == StoreHosting::kExternal
                             ? ""
                             : " (or the job has ended: the store its agent hosted ended with it)";
    return refuse(
        {kStatusNoJob, fmt::format("no job at {}: nothing answered within {} s ({}); check "
                                   "--rdzv-endpoint{}",
                                   printable(where), kConnectTimeout.count() / 1000,
                                   printable(error.what()), hosted)});
  } catch (const rendezvous::StoreError& error) {
    return failedWhileRead(error);
  }
  if (status.nodes.empty() && status.unreadable.empty() && !status.records) {
    return refuse(
        {kStatusNoJob,
         fmt::format("no job '{}' at {}: no node of that run id has registered or published "
                     "its status; check --rdzv-id",
                     printable(rdzv.runId), printable(where))});
  }
  const double now = epochNow();
  if (json) {
    std::printf("%s\n", renderJsonText(status, now).c_str());
  } else {
    std::fputs(renderText(status, now).c_str(), stdout);
  }
  std::fflush(stdout);
  return ended(status) ? kStatusEnded : kStatusShown;
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
    // The agent's way to the store (agent/agent.cc), without hosting it.
    StoreAccess access = storeAccess(rdzv);
    // Nothing this command reads is larger (a snapshot is at most kMaxSnapshotBytes, a listing
    // kMaxListedBytes): a larger value is not read (StoreValueTooLargeError: that key is set
    // aside, the others shown), never buffered.
    access.endpoint.maxReplyValueBytes = rendezvous::Store::kMaxListedBytes;
    backend = makeStoreBackend(rdzv, {std::move(access.endpoint)});
  } catch (const StoreBackendError& error) {
    throw UsageError(error.what());
  }

  if (!given.watch) return showOnce(*backend, rdzv, given.json);
  // One screen redrawn (a terminal: the cursor home and the screen cleared first), until the job
  // ends or cannot be read; Ctrl-C stops it.
  const bool redraw = !given.json && ::isatty(STDOUT_FILENO) == 1;
  for (;;) {
    if (redraw) std::fputs("\x1b[H\x1b[2J", stdout);
    const int code = showOnce(*backend, rdzv, given.json);
    if (code != kStatusShown) return code;
    std::this_thread::sleep_for(*given.watch);
  }
}

}  // namespace

Subcommand statusSubcommand() {
  return {"status", "what a running job is doing, read from its rendezvous (ddprun status --help)",
          runStatus};
}

}  // namespace ddprun::launcher
