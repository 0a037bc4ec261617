// Whether an agent hosts the job's rendezvous store, where it listens and what it advertises
// (stores/hosting_policy.h): the rules as values, no server started, no name resolved.
#include "stores/hosting_policy.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace {

using namespace ddprun::launcher;
using Code = ddprun::rendezvous::ServerError::Code;

// A multi-node job of `backend` on host:29400, this node of rank `nodeRank`.
RendezvousConfig job(RdzvBackend backend, const std::string& host = "10.0.0.1", int nodeRank = 0) {
  RendezvousConfig config;
  config.backend = backend;
  config.host = host;
  config.port = 29400;
  config.minNodes = 2;
  config.maxNodes = 2;
  config.nodeRank = nodeRank;
  return config;
}

// What the host-name fact would answer, and the names it was asked about.
struct LoopbackFact {
  bool answer = false;
  std::vector<std::string> asked;
  auto fn() {
    return [this](const std::string& host) {
      asked.push_back(host);
      return answer;
    };
  }
};

}  // namespace

TEST_CASE("who hosts the rendezvous store is a property of the backend", "[stores][hosting]") {
  CHECK(storeHosting(RdzvBackend::kStatic) == StoreHosting::kNodeRankZero);
  CHECK(storeHosting(RdzvBackend::kC10d) == StoreHosting::kFirstOnEndpoint);
  CHECK(storeHosting(RdzvBackend::kEtcd) == StoreHosting::kExternal);
}

TEST_CASE("must host: static node rank 0, --standalone, is_host=true", "[stores][hosting]") {
  LoopbackFact fact;
  CHECK(decideHosting(job(RdzvBackend::kStatic), fact.fn()).role == HostingRole::kMustHost);
  RendezvousConfig standalone = job(RdzvBackend::kC10d, "127.0.0.1");
  standalone.standalone = true;
  standalone.maxNodes = 1;
  CHECK(decideHosting(standalone, fact.fn()).role == HostingRole::kMustHost);
  RendezvousConfig chosen = job(RdzvBackend::kC10d, "10.0.0.1", 3);
  chosen.settings.isHost = true;
  CHECK(decideHosting(chosen, fact.fn()).role == HostingRole::kMustHost);
  const HostingDecision must = decideHosting(chosen, fact.fn());
  CHECK(must.mustHost());
  CHECK(must.mayHost());
}

TEST_CASE("may host: a c10d agent with no is_host, and the others are clients",
          "[stores][hosting]") {
  LoopbackFact fact;
  const HostingDecision c10d = decideHosting(job(RdzvBackend::kC10d, "10.0.0.1", 5), fact.fn());
  CHECK(c10d.role == HostingRole::kMayHost);
  CHECK(c10d.mayHost());
  CHECK_FALSE(c10d.mustHost());
  CHECK(fact.asked == std::vector<std::string>{"10.0.0.1"});  // it may listen there: asked
  fact.asked.clear();
  // is_host=false: a client of whichever node hosts.
  RendezvousConfig notHost = job(RdzvBackend::kC10d);
  notHost.settings.isHost = false;
  CHECK(decideHosting(notHost, fact.fn()).role == HostingRole::kClient);
  // The static backend's other nodes, and every etcd agent: the store is elsewhere.
  CHECK(decideHosting(job(RdzvBackend::kStatic, "10.0.0.1", 1), fact.fn()).role ==
        HostingRole::kClient);
  const HostingDecision etcd = decideHosting(job(RdzvBackend::kEtcd), fact.fn());
  CHECK(etcd.role == HostingRole::kClient);
  CHECK_FALSE(etcd.listenEverywhere);
  // A client never listens, so the name is not resolved for it.
  CHECK(fact.asked.empty());
}

TEST_CASE("listen everywhere: a multi-node endpoint that names this host through loopback",
          "[stores][hosting]") {
  LoopbackFact fact;
  fact.answer = true;  // Debian's "127.0.1.1 <hostname>": the other nodes resolve it elsewhere
  const HostingDecision named = decideHosting(job(RdzvBackend::kC10d, "node-a"), fact.fn());
  CHECK(named.listenEverywhere);
  CHECK(fact.asked == std::vector<std::string>{"node-a"});
  // The others advertise and listen where they were told.
  fact.answer = false;
  CHECK_FALSE(decideHosting(job(RdzvBackend::kC10d, "node-b"), fact.fn()).listenEverywhere);
  // Not for one node (nobody else needs to reach it), nor where --local-addr says where this node
  // is: the name is not even looked up then.
  fact.answer = true;
  fact.asked.clear();
  RendezvousConfig single = job(RdzvBackend::kC10d, "node-a");
  single.minNodes = single.maxNodes = 1;
  CHECK_FALSE(decideHosting(single, fact.fn()).listenEverywhere);
  RendezvousConfig local = job(RdzvBackend::kC10d, "node-a");
  local.localAddr = "10.0.0.7";
  CHECK_FALSE(decideHosting(local, fact.fn()).listenEverywhere);
  CHECK(fact.asked.empty());
}

TEST_CASE("Kubernetes: a PyTorchJob's master pod given localhost listens on every interface",
          "[stores][hosting][cluster]") {
  // Kubeflow writes MASTER_ADDR=localhost into the master pod; the workers reach it by its
  // service name, so its store listens everywhere (as torchrun's does) and advertises the name.
  LoopbackFact fact;
  const HostingDecision master =
      decideHosting(job(RdzvBackend::kStatic, "localhost", 0), fact.fn());
  CHECK(master.mustHost());
  CHECK(master.listenEverywhere);
  CHECK(fact.asked.empty());  // "localhost" decides by itself
  CHECK(advertisedAddress(job(RdzvBackend::kStatic, "localhost", 0), master.listenEverywhere) ==
        "localhost");
  // The rule is the static master's: a c10d endpoint named "localhost" is this host's loopback.
  CHECK_FALSE(decideHosting(job(RdzvBackend::kC10d, "localhost"), fact.fn()).listenEverywhere);
  // A worker pod (node rank 1) is a client of the master's service.
  CHECK_FALSE(decideHosting(job(RdzvBackend::kStatic, "localhost", 1), fact.fn()).mayHost());
}

TEST_CASE("a server that cannot listen: be a client, listen everywhere, or fail",
          "[stores][hosting]") {
  LoopbackFact fact;
  const RendezvousConfig c10d = job(RdzvBackend::kC10d, "10.0.0.1", 2);
  const HostingDecision may = decideHosting(c10d, fact.fn());
  // Someone else's endpoint (served already, another host's address, a name not resolved yet):
  // a node that only may host is a client of it.
  CHECK(onListenFailure(c10d, may, Code::kAddressInUse) == ListenFailureStep::kBeClient);
  CHECK(onListenFailure(c10d, may, Code::kAddressNotAvailable) == ListenFailureStep::kBeClient);
  CHECK(onListenFailure(c10d, may, Code::kUnresolvedHost) == ListenFailureStep::kBeClient);
  CHECK(onListenFailure(c10d, may, Code::kOther) == ListenFailureStep::kFail);

  const RendezvousConfig master = job(RdzvBackend::kStatic, "master-svc", 0);
  const HostingDecision must = decideHosting(master, fact.fn());
  // A Kubernetes service name that appears after its pod: the host listens everywhere meanwhile.
  CHECK(onListenFailure(master, must, Code::kUnresolvedHost) ==
        ListenFailureStep::kListenEverywhere);
  CHECK(onListenFailure(master, must, Code::kAddressInUse) == ListenFailureStep::kFail);
  CHECK(onListenFailure(master, must, Code::kAddressNotAvailable) == ListenFailureStep::kFail);
  // ... but not for a one-node job, nor with --local-addr: nobody else waits for the name.
  RendezvousConfig alone = master;
  alone.minNodes = alone.maxNodes = 1;
  CHECK(onListenFailure(alone, decideHosting(alone, fact.fn()), Code::kUnresolvedHost) ==
        ListenFailureStep::kFail);
  // A port ddprun chose (Slurm's): its line names where the port came from.
  RendezvousConfig slurm = master;
  slurm.endpointSource = "is derived from SLURM_JOB_ID; set MASTER_PORT";
  CHECK(onListenFailure(slurm, decideHosting(slurm, fact.fn()), Code::kAddressInUse) ==
        ListenFailureStep::kFailNamingPortSource);
}

TEST_CASE("the advertised address: --local-addr, standalone's loopback, the name, or the route",
          "[stores][hosting]") {
  RendezvousConfig config = job(RdzvBackend::kC10d, "node-a");
  CHECK(advertisedAddress(config, false) == std::nullopt);  // this host's address toward the store
  CHECK(advertisedAddress(config, true) == "node-a");       // listening everywhere: the name
  config.standalone = true;
  CHECK(advertisedAddress(config, false) == "127.0.0.1");
  config.localAddr = "10.0.0.7";
  CHECK(advertisedAddress(config, true) == "10.0.0.7");  // --local-addr wins
}

TEST_CASE("the connection budget keeps descriptors for the agent and its workers",
          "[stores][hosting][limits]") {
  const std::size_t most = ddprun::rendezvous::ServerOptions{}.maxConnections;
  // Plenty of descriptors: the server's own cap.
  CHECK(hostedStoreConnections(8, 1u << 20) == most);
  // 1024 descriptors, 8 workers: 64 + 8 * 16 = 192 kept, the rest split between two stores.
  CHECK(hostedStoreConnections(8, 1024) == (1024 - 192) / 2);
  // More workers, fewer connections each store may hold.
  CHECK(hostedStoreConnections(32, 1024) < hostedStoreConnections(8, 1024));
  // Never below the few the agents' own clients need, even with no descriptor to spare.
  CHECK(hostedStoreConnections(8, 100) == 16);
  CHECK(hostedStoreConnections(0, 0) == 16);
  // nproc 0 or less counts as one worker's reserve.
  CHECK(hostedStoreConnections(0, 1024) == hostedStoreConnections(1, 1024));
}
