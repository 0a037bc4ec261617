#include "cli/rendezvous.h"

#include <fmt/format.h>

#include <string>

#include "cli/host_probes.h"
#include "cli/rdzv_conf.h"
#include "cli/value_parsers.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// --standalone: one node with its own c10d store on 127.0.0.1, a free port and a random run id.
void resolveStandalone(const GivenValue& standalone, const Arguments& arguments,
                       CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  if (rdzv.maxNodes != 1) {
    throw UsageError(fmt::format(
        "{} is single-node but --nnodes allows {} nodes; drop --nnodes or use --rdzv-backend "
        "c10d with --rdzv-endpoint for a multi-node job",
        printable(standalone.origin), rdzv.maxNodes));
  }
  for (const auto name : {"rdzv-backend", "rdzv-endpoint", "rdzv-id"}) {
    if (const auto* ignored = arguments.given(name)) {
      result.warnings.push_back(
          fmt::format("{} ignores {} (it always uses c10d on 127.0.0.1 with a "
                      "free port and a random run id)",
                      printable(standalone.origin), label(*ignored)));
    }
  }
  rdzv.standalone = true;
  rdzv.backend = RdzvBackend::kC10d;
  rdzv.endpoint = "127.0.0.1:0";
  rdzv.host = "127.0.0.1";
  rdzv.port = 0;
  rdzv.runId = common::randomHexId();
}

// --rdzv-backend: static (the default) or c10d.
RdzvBackend chooseBackend(const Arguments& arguments) {
  const GivenValue backend = arguments.givenOr("rdzv-backend", "static");
  const std::string name(trim(backend.value));
  if (name == "static") return RdzvBackend::kStatic;
  if (name == "c10d") return RdzvBackend::kC10d;
  if (name == "etcd" || name == "etcd-v2") {
    throw UsageError(fmt::format(
        "{}: etcd rendezvous is not supported by ddprun; use --rdzv-backend c10d", label(backend)));
  }
  throw UsageError(fmt::format("{} is not a rendezvous backend; use static or c10d, e.g. {}",
                               label(backend), example(backend, "c10d")));
}

// c10d: the store at --rdzv-endpoint (port 29400 unless given), else localhost:29400.
void resolveC10dEndpoint(const Arguments& arguments, const GivenValue* endpoint,
                         CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  if (endpoint != nullptr) {
    const HostPort parsed = parseEndpoint(*endpoint);
    checkResolvable(parsed.host, *endpoint);
    rdzv.host = parsed.host;
    rdzv.port = parsed.port.value_or(kDefaultC10dPort);
    return;
  }
  for (const auto name : {"master-addr", "master-port"}) {
    if (const auto* ignored = arguments.given(name)) {
      result.warnings.push_back(
          fmt::format("{} is only used by the static backend; with c10d give the "
                      "store's address as --rdzv-endpoint HOST:PORT",
                      label(*ignored)));
    }
  }
  rdzv.host = "localhost";
  rdzv.port = kDefaultC10dPort;
  if (rdzv.maxNodes > 1) {
    result.warnings.push_back(fmt::format(
        "--rdzv-backend c10d without --rdzv-endpoint uses localhost:{}, which only works when "
        "every node runs on this host; give --rdzv-endpoint HOST:PORT",
        kDefaultC10dPort));
  }
}

// The static backend's node rank and port make sense for its node count.
void checkStaticNodes(const Arguments& arguments, CommandLine& result, std::uint16_t port) {
  const RendezvousConfig& rdzv = result.config.rdzv;
  if (rdzv.minNodes != rdzv.maxNodes) {
    result.warnings.push_back(fmt::format(
        "--nnodes {}:{} with the static backend waits for exactly {} nodes; use --rdzv-backend "
        "c10d for an elastic range",
        rdzv.minNodes, rdzv.maxNodes, rdzv.maxNodes));
  }
  if (rdzv.nodeRank >= rdzv.maxNodes) {
    const GivenValue rank = arguments.givenOr("node-rank", "0");
    throw UsageError(
        fmt::format("{} is outside 0..{} for {} node{}; give a rank below the node count",
                    label(rank), rdzv.maxNodes - 1, rdzv.maxNodes, rdzv.maxNodes == 1 ? "" : "s"));
  }
  if (port == 0 && rdzv.maxNodes > 1) {
    throw UsageError(fmt::format(
        "{} picks a free port, which the other {} nodes cannot know; give every node the same "
        "port, e.g. --master-port 29500",
        label(arguments.givenOr("master-port", "0")), rdzv.maxNodes - 1));
  }
}

// Static: node rank r of exactly MAX nodes; the store is at the endpoint if one is given, else
// at --master-addr:--master-port.
void resolveStaticEndpoint(const Arguments& arguments, const GivenValue* endpoint,
                           CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  const std::uint16_t port = rdzv.masterPort.value_or(kDefaultMasterPort);
  checkStaticNodes(arguments, result, port);
  if (endpoint != nullptr) {
    const HostPort parsed = parseEndpoint(*endpoint);
    checkResolvable(parsed.host, *endpoint);
    rdzv.host = parsed.host;
    rdzv.port = parsed.port.value_or(port);
    return;
  }
  const GivenValue master = arguments.givenOr("master-addr", rdzv.masterAddr);
  std::string host(trim(master.value));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  checkResolvable(host, master);
  rdzv.host = host;
  rdzv.port = port;
}

}  // namespace

void resolveRendezvous(const Arguments& arguments, CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  // The backend first: which --rdzv-conf keys are read, and so checked, depends on it.
  const GivenValue* standalone = arguments.given("standalone");
  rdzv.backend = standalone != nullptr ? RdzvBackend::kC10d : chooseBackend(arguments);
  RdzvConf conf;
  if (const auto* given = arguments.given("rdzv-conf")) {
    conf = parseRdzvConf(*given, rdzv.backend, result.warnings);
  }
  rdzv.settings = conf.settings;
  if (standalone != nullptr) return resolveStandalone(*standalone, arguments, result);
  if (const auto* id = arguments.given("rdzv-id")) rdzv.runId = id->value;
  // torchrun's static rendezvous waits `timeout` (its TCPStore timeout, 900 s unless given) for
  // the nodes and the master's store to come.
  if (rdzv.backend == RdzvBackend::kStatic && !conf.joinTimeoutGiven) {
    rdzv.settings.joinTimeout = conf.staticTimeout.value_or(kStaticTimeout);
  }
  const GivenValue* endpoint = arguments.given("rdzv-endpoint");
  if (endpoint != nullptr && trim(endpoint->value).empty()) endpoint = nullptr;
  if (endpoint != nullptr) rdzv.endpoint = std::string(trim(endpoint->value));
  if (rdzv.backend == RdzvBackend::kC10d) {
    resolveC10dEndpoint(arguments, endpoint, result);
  } else {
    resolveStaticEndpoint(arguments, endpoint, result);
  }
}

}  // namespace ddprun::launcher::cli_detail
