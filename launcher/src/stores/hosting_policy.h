// Whether this agent hosts the job's rendezvous store, where it listens and what it advertises: a
// decision from the job's rendezvous config and a few facts about this host, with no I/O, so that
// each rule is tested on its own (tests/launcher/hosting_policy_test.cc). HostedStores
// (stores/hosted_stores.h) starts the servers it decides on.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "ddprun/launcher/launch_config.h"
#include "ddprun/rendezvous/server.h"

namespace ddprun::launcher {

// Who hosts the job's rendezvous store, by backend: what the hosting rules ask instead of the
// backend's name.
enum class StoreHosting {
  // The agent of node rank 0 (static): its workers share the store (MASTER_ADDR:MASTER_PORT).
  kNodeRankZero,
  // The first agent to take the endpoint (c10d), unless is_host says which; or a
  // ddprun-rendezvous daemon already there, which every agent then reaches as a client.
  kFirstOnEndpoint,
  // No agent (etcd): the store is the cluster on the endpoint.
  kExternal,
};
StoreHosting storeHosting(RdzvBackend backend);

// This agent's part in hosting the rendezvous store.
enum class HostingRole {
  kClient,    // it only reaches the store (etcd, is_host=false, a static node of rank above 0)
  kMayHost,   // c10d: it hosts the store when the endpoint is free here, else it is a client
  kMustHost,  // static node rank 0, --standalone, is_host=true: it hosts, or the job cannot start
};

struct HostingDecision {
  HostingRole role = HostingRole::kClient;
  // Listen on every interface (0.0.0.0) rather than on the endpoint's host, and advertise the
  // endpoint's name (which the other nodes resolve for themselves).
  bool listenEverywhere = false;

  bool mayHost() const { return role != HostingRole::kClient; }
  bool mustHost() const { return role == HostingRole::kMustHost; }
};

// The decision for `config`. `namesThisHostThroughLoopback(host)`: whether the endpoint's host
// name resolves here to loopback addresses only (Debian's "127.0.1.1 <hostname>" line does that to
// a machine's own name); asked only where the answer decides (a multi-node job this agent may host
// for, with no --local-addr).
HostingDecision decideHosting(
    const RendezvousConfig& config,
    const std::function<bool(const std::string&)>& namesThisHostThroughLoopback);

// What an agent that may host does when its server cannot listen where `decision` says.
enum class ListenFailureStep {
  // The host name does not resolve yet (a Kubernetes service name appears seconds after its pod):
  // a node that must host listens on every interface, as torchrun's store does, and advertises
  // the name.
  kListenEverywhere,
  // The endpoint is served already (another agent of the job, or ddprun-rendezvous), or is
  // another host's address: this agent is a client.
  kBeClient,
  // A port ddprun chose (RendezvousConfig::endpointSource, Slurm's) is taken: the line names
  // where it came from and the setting that changes it.
  kFailNamingPortSource,
  // Anything else: the server's own error ends the agent.
  kFail,
};
ListenFailureStep onListenFailure(const RendezvousConfig& config, const HostingDecision& decision,
                                  rendezvous::ServerError::Code code);

// The address this node advertises to the others (MASTER_ADDR when it is group rank 0), or
// nullopt for its address toward the store (asked of the routing table once the store's name
// resolves).
std::optional<std::string> advertisedAddress(const RendezvousConfig& config, bool listenEverywhere);

// How many connections each store this agent hosts may hold, given its descriptor limit: it keeps
// a reserve for itself and its workers (hosting_policy.cc says how much and why).
std::size_t hostedStoreConnections(int nprocPerNode, std::size_t descriptorLimit);

}  // namespace ddprun::launcher
