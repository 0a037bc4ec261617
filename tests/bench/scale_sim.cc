// Round formation at scale, in simulation (issue #22 point 6; scripts/bench.sh scale).
//
// N simulated agents in this one process, each a real Membership over its own store connections
// (control, watch, heartbeat: what an agent opens), no workers, against a running store: a
// ddprun-rendezvous daemon (c10d) or an etcd (etcd). It times
//   open    every agent connects, gets a node id and starts holding its alive key;
//   form    from the moment every agent is open, all join round 0 at once, until the last one
//           knows the round (group rank 0 published its worker store, as an agent does);
//   reform  the last group rank announces it leaves (node_left) and goes; the others see the
//           stop and join the next round: from the announcement until the last knows it;
// and counts the store operations the agents made in each phase (requests, and the keys they
// named: a multiGet of N keys is one request and N keys; the bytes of the values the store sent
// back), so that a part that grows faster than N shows itself per node. With --store-pid, the store process's CPU seconds in each phase and
// its peak RSS (VmHWM) at the end. Output: one JSON line on stdout.
//
// A benchmark, never a timed test: bench_scale.py runs it under the shared lock.
#include <atomic>
#include <barrier>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/file_text.h"
#include "core/proc_stat.h"
#include "membership/membership.h"
#include "membership/store_backends.h"

namespace {

using namespace ddprun::launcher;
using ddprun::rendezvous::HoldingStore;
using ddprun::rendezvous::ListedKeys;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Requests and keys named, for every connection of every simulated agent.
struct Counts {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> keys{0};
  std::atomic<std::uint64_t> readBytes{0};  // of the values the store sent back
  void count(std::size_t named) {
    requests.fetch_add(1, std::memory_order_relaxed);
    keys.fetch_add(named, std::memory_order_relaxed);
  }
  void read(std::size_t bytes) { readBytes.fetch_add(bytes, std::memory_order_relaxed); }
};

// A connection that counts what goes through it (the store's own view, from the client side).
class CountingStore final : public HoldingStore {
 public:
  CountingStore(std::unique_ptr<HoldingStore> inner, Counts& counts)
      : inner_(std::move(inner)), counts_(counts) {}
  void set(std::string_view key, std::string_view value) override { counts_.count(1); inner_->set(key, value); }
  std::string get(std::string_view key) override {
    counts_.count(1);
    std::string value = inner_->get(key);
    counts_.read(value.size());
    return value;
  }
  std::optional<std::string> tryGet(std::string_view key) override {
    counts_.count(1);
    std::optional<std::string> value = inner_->tryGet(key);
    counts_.read(value ? value->size() : 0);
    return value;
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    counts_.count(1);
    return inner_->add(key, delta);
  }
  std::int64_t takeTicket(std::string_view key) override {
    counts_.count(1);
    return inner_->takeTicket(key);
  }
  std::int64_t ticketCount(std::string_view key) override {
    counts_.count(1);
    return inner_->ticketCount(key);
  }
  std::string compareSet(std::string_view key, std::string_view expected, std::string_view desired) override {
    counts_.count(1);
    std::string value = inner_->compareSet(key, expected, desired);
    counts_.read(value.size());
    return value;
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    counts_.count(keys.size());
    inner_->wait(keys, timeout);
  }
  bool check(const std::vector<std::string>& keys) override {
    counts_.count(keys.size());
    return inner_->check(keys);
  }
  bool deleteKey(std::string_view key) override { counts_.count(1); return inner_->deleteKey(key); }
  std::int64_t numKeys() override { counts_.count(1); return inner_->numKeys(); }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    counts_.count(keys.size());
    std::vector<std::string> values = inner_->multiGet(keys);
    for (const std::string& value : values) counts_.read(value.size());
    return values;
  }
  void multiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values) override {
    counts_.count(keys.size());
    inner_->multiSet(keys, values);
  }
  void append(std::string_view key, std::string_view value) override { counts_.count(1); inner_->append(key, value); }
  std::vector<std::string> listKeys() override { counts_.count(1); return inner_->listKeys(); }
  ListedKeys listPrefix(std::string_view prefix, std::size_t maxKeys) override {
    ListedKeys listed = inner_->listPrefix(prefix, maxKeys);
    counts_.count(std::max<std::size_t>(1, listed.keys.size()));
    return listed;
  }
  std::int64_t deletePrefix(std::string_view prefix) override { counts_.count(1); return inner_->deletePrefix(prefix); }
  void setTimeout(Duration timeout) override {
    Store::setTimeout(timeout);
    inner_->setTimeout(timeout);
  }
  std::string hold(std::string_view key, std::string_view value, std::chrono::milliseconds ttl,
                   std::string_view notifyKey, std::string_view notifyValue) override {
    counts_.count(1);
    return inner_->hold(key, value, ttl, notifyKey, notifyValue);
  }
  bool release(std::string_view key) override { counts_.count(1); return inner_->release(key); }
  ddprun::rendezvous::HoldLapse holdLapse() const override { return inner_->holdLapse(); }
  std::vector<std::string> waitForAnyMissing(const std::vector<std::string>& keys, Duration timeout) override {
    counts_.count(keys.size());
    return inner_->waitForAnyMissing(keys, timeout);
  }

 private:
  std::unique_ptr<HoldingStore> inner_;
  Counts& counts_;
};

class CountingBackend final : public StoreBackend {
 public:
  CountingBackend(StoreBackend& inner, Counts& counts) : inner_(inner), counts_(counts) {}
  std::unique_ptr<HoldingStore> connect(std::chrono::milliseconds callTimeout,
                                        std::chrono::milliseconds connectTimeout) override {
    return std::make_unique<CountingStore>(inner_.connect(callTimeout, connectTimeout), counts_);
  }
  std::string address() const override { return inner_.address(); }
  StoreTenancy tenancy() const override { return inner_.tenancy(); }

 private:
  StoreBackend& inner_;
  Counts& counts_;
};

// The store process's CPU seconds so far (0 without a pid).
double storeCpuSeconds(pid_t pid) {
  if (pid <= 0) return 0;
  const auto stat = readProcStat(pid);
  if (!stat) return 0;
  return static_cast<double>(stat->userTicks + stat->systemTicks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The store process's peak resident set in MiB (VmHWM; 0 without a pid).
double storePeakRssMiB(pid_t pid) {
  if (pid <= 0) return 0;
  const auto status = readFileText(fmt::format("/proc/{}/status", pid), nullptr, 64 * 1024);
  if (!status) return 0;
  const auto at = status->find("VmHWM:");
  if (at == std::string::npos) return 0;
  return std::strtod(status->c_str() + at + 6, nullptr) / 1024.0;
}

// This process's CPU seconds so far: the simulated agents' own cost, which on a small VM shares
// the cores with the store (if it nears cores x wall time, the simulator is the bottleneck).
double ownCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int usage(const std::string& problem) {
  std::cerr << "ddprun-scale-sim: " << problem
            << "; usage: ddprun-scale-sim --backend c10d|etcd --endpoint HOST:PORT --nodes N "
               "[--run-id ID] [--store-pid PID] [--timeout-s S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backendName = "c10d";
  std::string endpoint;
  std::string runId = "scale";
  int nodes = 0;
  pid_t storePid = 0;
  int timeoutSeconds = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    if (flag == "--backend") backendName = value;
    else if (flag == "--endpoint") endpoint = value;
    else if (flag == "--nodes") nodes = std::atoi(value.c_str());
    else if (flag == "--run-id") runId = value;
    else if (flag == "--store-pid") storePid = static_cast<pid_t>(std::atoi(value.c_str()));
    else if (flag == "--timeout-s") timeoutSeconds = std::atoi(value.c_str());
    else return usage(fmt::format("unknown option {}", flag));
  }
  const auto colon = endpoint.rfind(':');
  if (nodes < 2 || colon == std::string::npos) return usage("give --endpoint HOST:PORT and --nodes 2 or more");
  if (backendName != "c10d" && backendName != "etcd") return usage("--backend is c10d or etcd");
  std::signal(SIGPIPE, SIG_IGN);
  spdlog::set_level(spdlog::level::err);  // the waiting lines of thousands of agents are not the point

  RendezvousConfig config;
  config.backend = backendName == "etcd" ? RdzvBackend::kEtcd : RdzvBackend::kC10d;
  // --nnodes N-1:N: the round forms at N (max), and re-forms at once without the one that left
  // (min); last call never ends a forming round early here.
  config.minNodes = nodes - 1;
  config.maxNodes = nodes;
  config.endpoint = endpoint;
  config.host = endpoint.substr(0, colon);
  config.port = static_cast<std::uint16_t>(std::atoi(endpoint.c_str() + colon + 1));
  config.runId = runId;
  config.settings.joinTimeout = std::chrono::seconds(timeoutSeconds);
  config.settings.readTimeout = std::chrono::seconds(timeoutSeconds);
  config.settings.lastCallTimeout = std::chrono::seconds(timeoutSeconds);
  // Renewals every second as an agent's (the store's load is real), but a hold lapses after 30 s
  // rather than 5: thousands of simulated agents' threads on two cores can wait seconds for a
  // core, and a heartbeat thread that was not scheduled is the simulator's delay, not the store's
  // (4,096 agents lost their own holds that way).
  config.settings.keepAliveMaxAttempts = 30;
  if (config.backend == RdzvBackend::kEtcd) {
    ddprun::rendezvous::etcd::EtcdEndpoint member;
    member.host = config.host;
    member.port = config.port;
    config.etcdEndpoints = {member};
  }
  StoreBackendInputs inputs;
  inputs.ddprunStore = rendezvousStoreOptions(config, {});
  std::unique_ptr<StoreBackend> real = makeStoreBackend(config, inputs);
  Counts counts;
  CountingBackend backend(*real, counts);

  struct Phase {
    double seconds = 0;
    double storeCpu = 0;
    double simCpu = 0;
    std::uint64_t requests = 0;
    std::uint64_t keys = 0;
    std::uint64_t readBytes = 0;
  };
  Phase open, form, reform;
  std::mutex mutex;  // guards the phase records and failures
  std::vector<std::string> failures;
  Clock::time_point phaseStart;
  double cpuAtStart = 0;
  double simCpuAtStart = 0;
  std::uint64_t requestsAtStart = 0;
  std::uint64_t keysAtStart = 0;
  std::uint64_t readBytesAtStart = 0;
  const auto startPhase = [&] {
    cpuAtStart = storeCpuSeconds(storePid);
    simCpuAtStart = ownCpuSeconds();
    requestsAtStart = counts.requests.load();
    keysAtStart = counts.keys.load();
    readBytesAtStart = counts.readBytes.load();
    phaseStart = Clock::now();
  };
  const auto endPhase = [&](Phase& phase) {
    phase.seconds = secondsSince(phaseStart);
    phase.storeCpu = storeCpuSeconds(storePid) - cpuAtStart;
    phase.simCpu = ownCpuSeconds() - simCpuAtStart;
    phase.requests = counts.requests.load() - requestsAtStart;
    phase.keys = counts.keys.load() - keysAtStart;
    phase.readBytes = counts.readBytes.load() - readBytesAtStart;
  };
  // Each phase starts when every agent reached it and ends when every agent finished it: the
  // barrier's completion step (run by the last arrival) closes one phase and opens the next.
  std::atomic<int> stage{0};
  std::barrier sync(nodes, [&]() noexcept {
    if (stage == 0) startPhase();
    if (stage == 1) { endPhase(open); startPhase(); }
    if (stage == 2) endPhase(form);
    if (stage == 3) { endPhase(reform); }
    ++stage;
  });
  // The leaver's announcement starts the re-form phase, not the barrier.
  std::atomic<bool> failed{false};
  const auto fail = [&](const std::string& what) {
    std::lock_guard lock(mutex);
    failures.push_back(what);
    failed = true;
  };

  // The figures so far (a phase that did not end reads 0): one JSON line.
  const auto result = [&] {
    nlohmann::json line = {{"backend", backendName},
                           {"nodes", nodes},
                           {"ok", failures.empty()},
                           {"open_s", open.seconds},
                           {"form_s", form.seconds},
                           {"reform_s", reform.seconds},
                           {"store_cpu_open_s", open.storeCpu},
                           {"store_cpu_form_s", form.storeCpu},
                           {"store_cpu_reform_s", reform.storeCpu},
                           {"sim_cpu_form_s", form.simCpu},
                           {"sim_cpu_reform_s", reform.simCpu},
                           {"requests_per_node_form", static_cast<double>(form.requests) / nodes},
                           {"keys_per_node_form", static_cast<double>(form.keys) / nodes},
                           {"requests_per_node_reform", static_cast<double>(reform.requests) / nodes},
                           {"keys_per_node_reform", static_cast<double>(reform.keys) / nodes},
                           {"read_bytes_per_node_form", static_cast<double>(form.readBytes) / nodes},
                           {"read_bytes_per_node_reform", static_cast<double>(reform.readBytes) / nodes},
                           {"store_peak_rss_mib", storePeakRssMiB(storePid)}};
    return line;
  };
  std::vector<std::thread> agents;
  agents.reserve(nodes);
  for (int i = 0; i < nodes; ++i) {
    agents.emplace_back([&, i] {
      NodeInfo self;
      self.address = "127.0.0.1";
      self.hostname = fmt::format("sim-{}", i);
      self.nproc = 8;
      self.pid = 100000 + i;
      Membership membership(config, backend, self, [] { return Clock::now(); });
      bool ok = true;
      sync.arrive_and_wait();  // stage 0 -> open starts
      try {
        membership.open();
      } catch (const std::exception& error) {
        fail(fmt::format("agent {} open: {}", i, error.what()));
        ok = false;
      }
      sync.arrive_and_wait();  // stage 1: open ends, form starts
      std::optional<Round> round;
      if (ok && !failed) {
        try {
          round = membership.join(-1);
          if (round->hostsWorkerStore) membership.publishWorkerStore(round->number, "127.0.0.1", 29500);
        } catch (const std::exception& error) {
          fail(fmt::format("agent {} join: {}", i, error.what()));
          membership.cancel();
        }
      }
      sync.arrive_and_wait();  // stage 2: form ends
      if (round && !failed) {
        try {
          if (round->groupRank == nodes - 1) {
            {
              std::lock_guard lock(mutex);
              startPhase();
            }
            membership.announce(round->number,
                                StopReason::nodeLeft(membership.self().id, round->groupRank, self.hostname, SIGTERM));
            membership.close(false);
          } else {
            membership.waitForStop(round->number);
            const Round next = membership.join(round->number + 1);
            if (next.hostsWorkerStore) membership.publishWorkerStore(next.number, "127.0.0.1", 29500);
          }
        } catch (const std::exception& error) {
          fail(fmt::format("agent {} re-form: {}", i, error.what()));
        }
      }
      sync.arrive_and_wait();  // stage 3: re-form ends
      membership.close(false);
    });
  }
  // A wedged run must not outlive the benchmark's patience: say so and leave.
  std::thread watchdog([&] {
    const auto deadline = Clock::now() + std::chrono::seconds(timeoutSeconds) + 60s;
    while (Clock::now() < deadline) {
      std::this_thread::sleep_for(1s);
      if (stage.load() >= 4) return;
    }
    const int reached = stage.load();
    std::cerr << "ddprun-scale-sim: gave up after " << timeoutSeconds + 60 << " s in stage " << reached << "\n";
    // What did finish still counts (a round that formed but did not re-form in time).
    nlohmann::json line;
    {
      std::lock_guard lock(mutex);
      line = result();
    }
    line["ok"] = false;
    if (reached == 2 || reached == 3) {
      // Where the unfinished phase spent its time so far: the store's work and the simulator's.
      Phase partial;
      {
        std::lock_guard lock(mutex);
        endPhase(partial);
      }
      line["unfinished_phase"] = reached == 2 ? "form" : "reform";
      line["unfinished_s"] = partial.seconds;
      line["unfinished_requests_per_node"] = static_cast<double>(partial.requests) / nodes;
      line["unfinished_keys_per_node"] = static_cast<double>(partial.keys) / nodes;
      line["unfinished_store_cpu_s"] = partial.storeCpu;
      line["unfinished_sim_cpu_s"] = partial.simCpu;
    }
    line["first_failure"] = fmt::format("gave up after {} s in stage {} (3: re-form)", timeoutSeconds + 60, reached);
    {
      // What had failed by then is often why the rest waited.
      std::lock_guard lock(mutex);
      if (!failures.empty()) {
        line["failed_agents"] = failures.size();
        line["first_failure"] = fmt::format("{}; {} agent(s) had failed first: {}", line["first_failure"].get<std::string>(),
                                            failures.size(), failures.front());
      }
    }
    std::cout << line.dump() << std::endl;
    std::_Exit(3);
  });
  for (auto& agent : agents) agent.join();
  watchdog.join();

  nlohmann::json line = result();
  if (!failures.empty()) line["first_failure"] = failures.front();
  std::cout << line.dump() << std::endl;
  return failures.empty() ? 0 : 1;
}
