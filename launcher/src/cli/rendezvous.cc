#include "cli/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "cli/host_probes.h"
#include "cli/rdzv_conf.h"
#include "cli/value_parsers.h"
#include "ddprun/common/local_address.h"
#include "ddprun/common/random_id.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/etcd_client.h"

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

// --rdzv-backend: static (the default), c10d, or etcd (also etcd-v2 and etcd-v3: one backend).
RdzvBackend chooseBackend(const Arguments& arguments, CommandLine& result) {
  const GivenValue backend = arguments.givenOr("rdzv-backend", "static");
  const std::string name(trim(backend.value));
  if (name == "static") return RdzvBackend::kStatic;
  if (name == "c10d") return RdzvBackend::kC10d;
  if (name == "etcd-v3") return RdzvBackend::kEtcd;
  if (name == "etcd" || name == "etcd-v2") {
    // The same job whichever name: torchrun's two etcd backends differ (a legacy state machine,
    // the dynamic one), ddprun's rounds are one, on the API every etcd since 3.4 serves.
    result.notes.push_back(fmt::format(
        "{}: ddprun speaks etcd's v3 API (torchrun's etcd backends speak v2, which etcd 3.4 turns "
        "off and 3.6 removed): the etcd needs no --enable-v2, and the job's keys are not "
        "torchrun's",
        label(backend)));
    return RdzvBackend::kEtcd;
  }
  throw UsageError(fmt::format("{} is not a rendezvous backend; use static, c10d or etcd, e.g. {}",
                               label(backend), example(backend, "c10d")));
}

// Whether an --rdzv-endpoint entry names its scheme ("http://", "https://", any case).
bool hasScheme(std::string_view entry) {
  return lowerCase(entry.substr(0, 7)) == "http://" || lowerCase(entry.substr(0, 8)) == "https://";
}

// etcd: the members' client URLs, --rdzv-endpoint host:port[,host:port...] (port 2379 unless
// given; http:// or https:// in front, else --rdzv-conf protocol's, else http), localhost:2379
// when none is given.
void resolveEtcdEndpoints(const Arguments& arguments, const GivenValue* endpoint,
                          CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  const RendezvousSettings& settings = rdzv.settings;
  for (const auto name : {"master-addr", "master-port"}) {
    if (const auto* ignored = arguments.given(name)) {
      result.warnings.push_back(fmt::format(
          "{} is only used by the static backend; with etcd give its members' addresses as "
          "--rdzv-endpoint HOST:PORT[,HOST:PORT...]",
          label(*ignored)));
    }
  }
  const GivenValue given =
      endpoint != nullptr ? *endpoint : GivenValue{nullptr, "localhost", "--rdzv-endpoint", false};
  // protocol=https (torch's key) applies to the entries written without a scheme.
  std::string text;
  for (const auto entry : split(given.value, ',')) {
    const std::string_view trimmed = trim(entry);
    if (!text.empty()) text += ',';
    if (settings.etcdHttps.value_or(false) && !trimmed.empty() && !hasScheme(trimmed))
      text += "https://";
    text += trimmed;
  }
  try {
    rdzv.etcdEndpoints = rendezvous::etcd::parseEtcdEndpoints(text);
  } catch (const rendezvous::etcd::EtcdEndpointError& error) {
    // label() and what() show an address without its user information.
    throw UsageError(fmt::format("{}: {}", label(given), error.what()));
  }
  for (const auto& member : rdzv.etcdEndpoints) checkResolvable(member.host, given);
  // Where this node's address is looked for (toward etcd) and what messages call the endpoint.
  rdzv.host = rdzv.etcdEndpoints.front().host;
  rdzv.port = rdzv.etcdEndpoints.front().port;
  // Each round's group rank 0 hosts its workers' store on its address toward etcd: toward a
  // member on this host (a per-node etcd gateway) that is a loopback address, which the other
  // hosts cannot reach.
  const bool allLoopback =
      std::all_of(rdzv.etcdEndpoints.begin(), rdzv.etcdEndpoints.end(),
                  [](const auto& e) { return common::isLoopbackAddress(e.host); });
  if (allLoopback && rdzv.maxNodes > 1 && rdzv.localAddr.empty()) {
    result.warnings.push_back(fmt::format(
        "{}: every etcd member is on this host, so this node's address toward etcd is a loopback "
        "address, which other hosts cannot reach for the round's workers' store; this works only "
        "when every node runs on this host: give --local-addr with this host's network address",
        label(given)));
  }
  const bool anyHttps = std::any_of(
      rdzv.etcdEndpoints.begin(), rdzv.etcdEndpoints.end(),
      [](const auto& e) { return e.scheme == rendezvous::etcd::EtcdEndpoint::Scheme::kHttps; });
  if (!anyHttps && !(settings.etcdCaCert.empty() && settings.etcdCert.empty())) {
    result.warnings.push_back(fmt::format(
        "--rdzv-conf: etcd's certificate files are not used with {} (every member is http://); "
        "write https:// in front of the members or add protocol=https",
        label(given)));
  }
}

// c10d: the store at --rdzv-endpoint (port 29400 unless given), else localhost:29400.
void resolveC10dEndpoint(const Arguments& arguments, const GivenValue* endpoint,
                         CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  if (endpoint != nullptr) {
    const HostPort parsed = parseEndpoint(*endpoint);
    warnIfUnresolved(parsed.host, *endpoint, result.warnings);
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
    warnIfUnresolved(parsed.host, *endpoint, result.warnings);
    rdzv.host = parsed.host;
    rdzv.port = parsed.port.value_or(port);
    return;
  }
  const GivenValue master = arguments.givenOr("master-addr", rdzv.masterAddr);
  std::string host(trim(master.value));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  warnIfUnresolved(host, master, result.warnings);
  rdzv.host = host;
  rdzv.port = port;
}

}  // namespace

void resolveRendezvous(const Arguments& arguments, CommandLine& result) {
  RendezvousConfig& rdzv = result.config.rdzv;
  // The backend first: which --rdzv-conf keys are read, and so checked, depends on it.
  const GivenValue* standalone = arguments.given("standalone");
  rdzv.backend = standalone != nullptr ? RdzvBackend::kC10d : chooseBackend(arguments, result);
  RdzvConf conf;
  if (const auto* given = arguments.given("rdzv-conf")) {
    conf = parseRdzvConf(*given, rdzv.backend, result.warnings);
  }
  rdzv.settings = conf.settings;
  // A spare waits in the store for a seat; a static job's seats are its fixed node ranks.
  if (const auto* spares = arguments.given("spares");
      spares != nullptr && rdzv.spares > 0 &&
      (standalone != nullptr || rdzv.backend == RdzvBackend::kStatic)) {
    throw UsageError(fmt::format(
        "{}: spares need a job whose nodes meet in a store (--rdzv-backend c10d or etcd); a "
        "{} job has no seat for one: drop --spares or choose c10d",
        label(*spares), standalone != nullptr ? "--standalone" : "static"));
  }
  if (standalone != nullptr) return resolveStandalone(*standalone, arguments, result);
  // A run id is one segment of every key of the job (one rule for every backend: on a shared
  // etcd a '/' would put one job inside another's keys).
  if (const auto* id = arguments.given("rdzv-id")) rdzv.runId = parseRunId(*id);
  // torchrun's static rendezvous waits `timeout` (its TCPStore timeout, 900 s unless given) for
  // the nodes and the master's store to come; its legacy etcd backend takes `timeout` as its join
  // timeout (600 s unless given, join_timeout's default).
  if (rdzv.backend == RdzvBackend::kStatic && !conf.joinTimeoutGiven) {
    rdzv.settings.joinTimeout = conf.timeout.value_or(kStaticTimeout);
  }
  if (rdzv.backend == RdzvBackend::kEtcd && !conf.joinTimeoutGiven && conf.timeout) {
    rdzv.settings.joinTimeout = *conf.timeout;
  }
  const GivenValue* endpoint = arguments.given("rdzv-endpoint");
  if (endpoint != nullptr && trim(endpoint->value).empty()) endpoint = nullptr;
  if (endpoint != nullptr) rdzv.endpoint = std::string(trim(endpoint->value));
  switch (rdzv.backend) {
    case RdzvBackend::kC10d:
      return resolveC10dEndpoint(arguments, endpoint, result);
    case RdzvBackend::kEtcd:
      return resolveEtcdEndpoints(arguments, endpoint, result);
    case RdzvBackend::kStatic:
      return resolveStaticEndpoint(arguments, endpoint, result);
  }
}

}  // namespace ddprun::launcher::cli_detail
