// ddprun-store-bench: load on a TCPStore server through ddprun's C++ client (TcpStore), so that
// ddprun-rendezvous and torch's own server can be measured with exactly the same client.
//
//   ops      N clients (one thread and connection each) loop set/get/add; ops/s and latency
//   barrier  N clients connect, add to a counter and wait until all have: the init pattern
//   idle     opens N idle connections, then one client measures add latency
//
// --serve-floor: no load; be the floor store (floor_store.h), the benchmark's kernel anchor.
// --token-file: the clients prove the job's token themselves (threads engine: ddprun's agents);
// --relay-token-file: they connect to a LoopbackRelay started in this process, which proves it for
// them (what PyTorch workers do under a token, through their agent's relay). --tls-cert: either
// of them speaks TLS to the store, trusting that certificate. --floor-proxy: the clients go
// through the least a user-space hop costs (floor_proxy.h), the relay's anchor. --relay-handoff
// (with --relay-token-file, and this program run with LD_PRELOAD=libddprun-relay-handoff.so): the
// relay hands each client a proven connection to the store, as the agent does for Python workers.
//
// Prints one JSON object per run on stdout. scripts/bench.sh drives it
// (tests/bench/bench_store.py).
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <thread>
#include <vector>

#include "auth/handshake.h"
#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/relay_handoff_wire.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "ddprun/rendezvous/tls.h"
#include "floor_proxy.h"
#include "floor_store.h"
#include "protocol/wire.h"

namespace po = boost::program_options;
using namespace ddprun::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string dialect = "torch113";
  std::string mode = "ops";
  std::string engine = "threads";
  int clients = 16;
  int rounds = 1000;
  int idle = 2000;
  std::optional<JobSecret> secret;       // --token-file
  std::shared_ptr<const TlsConfig> tls;  // --tls-cert
};

TcpStoreOptions clientOptions(const Config& config) {
  TcpStoreOptions options;
  options.host = config.host;
  options.port = static_cast<std::uint16_t>(config.port);
  options.dialect = config.dialect == "torch2" ? WireDialect::kTorch2 : WireDialect::kTorch113;
  options.timeout = std::chrono::seconds(120);
  options.connectTimeout = std::chrono::seconds(120);
  options.secret = config.secret;
  options.tls = config.tls;
  return options;
}

// Runs `body(i)` on `count` threads with small stacks (thousands of clients fit), joins them all.
void runThreads(int count, const std::function<void(int)>& body) {
  struct Start {
    const std::function<void(int)>* body;
    int index;
  };
  std::vector<pthread_t> threads(count);
  std::vector<Start> starts(count);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  for (int i = 0; i < count; ++i) {
    starts[i] = {&body, i};
    if (pthread_create(
            &threads[i], &attributes,
            [](void* arg) -> void* {
              auto* start = static_cast<Start*>(arg);
              (*start->body)(start->index);
              return nullptr;
            },
            &starts[i]) != 0) {
      throw std::runtime_error("pthread_create failed");
    }
  }
  for (auto& t : threads) pthread_join(t, nullptr);
  pthread_attr_destroy(&attributes);
}

double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

void benchOps(const Config& config) {
  std::vector<std::vector<double>> latencies(config.clients);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point started;
  runThreads(config.clients + 1, [&](int index) {
    if (index == config.clients) {  // the starter: everyone connected, then go
      while (ready.load() < config.clients)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      started = Clock::now();
      go.store(true);
      return;
    }
    TcpStore store(clientOptions(config));
    const std::string key = fmt::format("bench/{}", index);
    auto& mine = latencies[index];
    mine.reserve(static_cast<std::size_t>(config.rounds) * 3);
    ready.fetch_add(1);
    while (!go.load()) std::this_thread::yield();
    for (int r = 0; r < config.rounds; ++r) {
      auto t0 = Clock::now();
      store.set(key, "value-of-some-length");
      auto t1 = Clock::now();
      store.get(key);
      auto t2 = Clock::now();
      store.add("bench/counter", 1);
      auto t3 = Clock::now();
      mine.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      mine.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      mine.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
    }
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  const double ops = static_cast<double>(all.size());
  std::printf(
      "{\"mode\":\"ops\",\"clients\":%d,\"ops\":%.0f,\"seconds\":%.4f,\"ops_per_s\":%.0f,"
      "\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
      config.clients, ops, seconds, ops / seconds, percentile(all, 0.5), percentile(all, 0.99));
}

// The event-driven engine: one thread drives every connection with non-blocking sockets, the
// way redis-benchmark or wrk load a server, so the load generator's own cost (a thread wake-up
// per reply in the threads engine) stays small and the server's capacity shows. Each connection
// loops the same set/get/add as TcpStore sends them (get = WAIT + GET; SET has no reply, so it
// leaves in the same write as the WAIT that follows it).
void benchOpsEvented(const Config& config) {
  namespace wire = ddprun::rendezvous::protocol;
  const auto dialect = config.dialect == "torch2" ? WireDialect::kTorch2 : WireDialect::kTorch113;
  const std::string value = "value-of-some-length";
  struct Connection {
    int fd = -1;
    int step = 0;  // 0: SET+WAIT sent, 1: GET sent, 2: ADD sent
    int round = 0;
    std::size_t expect = 0;
    std::size_t have = 0;
    Clock::time_point sentAt;
    std::string key;
  };
  auto put = [&](std::string& out, wire::Op op) { wire::putU8(out, *wire::wireCode(dialect, op)); };
  auto key = [&](std::string& out, const std::string& k) { wire::putBlob(out, "/" + k); };
  std::vector<Connection> connections(config.clients);
  const int epoll = ::epoll_create1(0);
  auto sendStep = [&](Connection& c) {
    std::string out;
    if (c.step == 0) {
      put(out, wire::Op::kSet);
      key(out, c.key);
      wire::putBlob(out, value);
      put(out, wire::Op::kWait);
      wire::putU64(out, 1);
      key(out, c.key);
      c.expect = 1;
    } else if (c.step == 1) {
      put(out, wire::Op::kGet);
      key(out, c.key);
      c.expect = 8 + value.size();
    } else {
      put(out, wire::Op::kAdd);
      key(out, "bench/counter");
      wire::putI64(out, 1);
      c.expect = 8;
    }
    c.have = 0;
    c.sentAt = Clock::now();
    if (::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) {
      throw std::runtime_error("send failed");
    }
  };
  for (int i = 0; i < config.clients; ++i) {
    auto& c = connections[i];
    TcpStoreOptions o = clientOptions(config);
    c.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(o.port);
    ::inet_pton(AF_INET, o.host.c_str(), &address.sin_addr);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("connect failed");
    }
    const int on = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    if (dialect == WireDialect::kTorch2) {
      std::string hello;
      put(hello, wire::Op::kValidate);
      wire::putU32(hello, wire::kValidationMagic);
      put(hello, wire::Op::kPing);
      wire::putU32(hello, 7);
      ::send(c.fd, hello.data(), hello.size(), MSG_NOSIGNAL);
      char echo[4];
      if (::recv(c.fd, echo, 4, MSG_WAITALL) != 4) throw std::runtime_error("handshake failed");
    }
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    c.key = fmt::format("bench/{}", i);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = static_cast<std::uint32_t>(i);
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, c.fd, &event);
  }
  std::vector<double> latencies;
  latencies.reserve(static_cast<std::size_t>(config.clients) * config.rounds * 3);
  const auto started = Clock::now();
  for (auto& c : connections) sendStep(c);
  int finished = 0;
  std::vector<epoll_event> events(256);
  char buffer[4096];
  while (finished < config.clients) {
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 60000);
    if (n <= 0) throw std::runtime_error("no reply within 60 s");
    for (int e = 0; e < n; ++e) {
      Connection& c = connections[events[e].data.u32];
      const ssize_t got = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (got <= 0) throw std::runtime_error("connection lost");
      c.have += static_cast<std::size_t>(got);
      if (c.have < c.expect) continue;
      latencies.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - c.sentAt).count());
      c.step = (c.step + 1) % 3;
      if (c.step == 0 && ++c.round == config.rounds) {
        ++finished;
        continue;
      }
      sendStep(c);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const double ops = 3.0 * config.clients * config.rounds;
  for (auto& c : connections) ::close(c.fd);
  ::close(epoll);
  std::printf(
      "{\"mode\":\"ops\",\"engine\":\"evented\",\"clients\":%d,\"ops\":%.0f,\"seconds\":%.4f,"
      "\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
      config.clients, ops, seconds, ops / seconds, percentile(latencies, 0.5),
      percentile(latencies, 0.99));
}

void benchBarrier(const Config& config) {
  const std::string round = fmt::format("barrier/{}", Clock::now().time_since_epoch().count());
  // When each client had connected, had added itself, and was released (seconds from start).
  std::vector<double> connected(config.clients), added(config.clients), released(config.clients);
  const auto started = Clock::now();
  auto since = [&started] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  runThreads(config.clients, [&](int i) {
    TcpStore store(clientOptions(config));
    connected[i] = since();
    if (store.add(round + "/count", 1) == config.clients) store.set(round + "/done", "1");
    added[i] = since();
    store.wait({round + "/done"});
    released[i] = since();
  });
  const double seconds = since();
  auto last = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  std::printf(
      "{\"mode\":\"barrier\",\"clients\":%d,\"seconds\":%.4f,\"all_connected_s\":%.4f,"
      "\"all_added_s\":%.4f,\"all_released_s\":%.4f}\n",
      config.clients, seconds, last(connected), last(added), last(released));
}

// The barrier with the event-driven engine: one thread opens every connection (non-blocking
// connects), so what is timed is the server's accept/ADD/WAIT work rather than the creation of
// thousands of client threads on the same two cores. Same requests as the threads engine.
void benchBarrierEvented(const Config& config) {
  namespace wire = ddprun::rendezvous::protocol;
  const auto dialect = WireDialect::kTorch113;
  const std::string round = fmt::format("/barrier/{}", Clock::now().time_since_epoch().count());
  const std::string countKey = round + "/count";
  const std::string doneKey = round + "/done";
  auto put = [&](std::string& out, wire::Op op) { wire::putU8(out, *wire::wireCode(dialect, op)); };
  struct Client {
    int fd;
    int step = 0;  // 0 connecting, 1 awaiting the ADD reply, 2 awaiting STOP_WAITING, 3 released
    std::size_t have = 0;
    unsigned char reply[8];
  };
  std::vector<Client> clients(config.clients);
  const int epoll = ::epoll_create1(0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(config.port));
  ::inet_pton(AF_INET, config.host.c_str(), &address.sin_addr);
  const auto started = Clock::now();
  auto since = [&started] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  for (int i = 0; i < config.clients; ++i) {
    Client& c = clients[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    const int on = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 &&
        errno != EINPROGRESS) {
      throw std::runtime_error(fmt::format("connect failed: {}", std::strerror(errno)));
    }
    epoll_event event{};
    event.events = EPOLLOUT;
    event.data.u32 = static_cast<std::uint32_t>(i);
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, c.fd, &event);
  }
  int connected = 0, added = 0, released = 0;
  double allConnected = 0, allAdded = 0;
  std::vector<epoll_event> events(512);
  while (released < config.clients) {
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 60000);
    if (n <= 0) throw std::runtime_error("barrier stalled for 60 s");
    for (int e = 0; e < n; ++e) {
      Client& c = clients[events[e].data.u32];
      if (c.step == 0) {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) throw std::runtime_error(fmt::format("connect: {}", std::strerror(error)));
        if (++connected == config.clients) allConnected = since();
        std::string out;
        put(out, wire::Op::kAdd);
        wire::putBlob(out, countKey);
        wire::putI64(out, 1);
        ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.u32 = events[e].data.u32;
        ::epoll_ctl(epoll, EPOLL_CTL_MOD, c.fd, &event);
        c.step = 1;
        continue;
      }
      const std::size_t want = c.step == 1 ? 8 : 1;
      const ssize_t got = ::recv(c.fd, c.reply + c.have, want - c.have, 0);
      if (got <= 0) throw std::runtime_error("connection lost");
      c.have += static_cast<std::size_t>(got);
      if (c.have < want) continue;
      c.have = 0;
      if (c.step == 1) {
        if (++added == config.clients) allAdded = since();
        std::string out;
        if (static_cast<std::int64_t>(wire::getU64(c.reply)) == config.clients) {
          put(out, wire::Op::kSet);
          wire::putBlob(out, doneKey);
          wire::putBlob(out, "1");
        }
        put(out, wire::Op::kWait);
        wire::putU64(out, 1);
        wire::putBlob(out, doneKey);
        ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL);
        c.step = 2;
      } else {
        c.step = 3;
        ++released;
      }
    }
  }
  const double seconds = since();
  for (auto& c : clients) ::close(c.fd);
  ::close(epoll);
  std::printf(
      "{\"mode\":\"barrier\",\"engine\":\"evented\",\"clients\":%d,\"seconds\":%.4f,"
      "\"all_connected_s\":%.4f,\"all_added_s\":%.4f,\"all_released_s\":%.4f}\n",
      config.clients, seconds, allConnected, allAdded, seconds);
}

int rawConnect(const Config& config) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(config.port));
  ::inet_pton(AF_INET, config.host.c_str(), &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error("idle connect failed");
  }
  return fd;
}

std::vector<double> measureLatency(const Config& config, int count) {
  TcpStore store(clientOptions(config));
  std::vector<double> latencies;
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    store.add("idle/counter", 1);
    latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return latencies;
}

void benchIdle(const Config& config) {
  auto before = measureLatency(config, config.rounds);
  std::vector<int> idle;
  for (int i = 0; i < config.idle; ++i) idle.push_back(rawConnect(config));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the server accept them all
  auto with = measureLatency(config, config.rounds);
  for (int fd : idle) ::close(fd);
  const double p50Before = percentile(before, 0.5);
  const double p50With = percentile(with, 0.5);
  std::printf(
      "{\"mode\":\"idle\",\"idle\":%d,\"p50_us_before\":%.1f,\"p50_us_with\":%.1f,"
      "\"p99_us_before\":%.1f,\"p99_us_with\":%.1f,\"slowdown\":%.2f}\n",
      config.idle, p50Before, p50With, percentile(before, 0.99), percentile(with, 0.99),
      p50With / p50Before);
}

// A private directory for the relay's handoff socket (the agent's is its private directory),
// removed with the socket at exit.
class HandoffDirectory {
 public:
  HandoffDirectory() {
    char pattern[] = "/tmp/ddprun-bench-handoff-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("cannot make a handoff directory");
    path_ = pattern;
  }
  ~HandoffDirectory() {
    ::unlink(socket().c_str());
    ::rmdir(path_.c_str());
  }
  HandoffDirectory(const HandoffDirectory&) = delete;
  HandoffDirectory& operator=(const HandoffDirectory&) = delete;
  std::string socket() const { return path_ + "/relay.sock"; }

 private:
  std::string path_;
};

}  // namespace

int main(int argc, char** argv) {
  Config config;
  po::options_description options("ddprun-store-bench options");
  // clang-format off
  options.add_options()
      ("help", "show help")
      ("host", po::value(&config.host)->default_value(config.host))
      ("port", po::value(&config.port)->required())
      ("dialect", po::value(&config.dialect)->default_value(config.dialect), "torch113 or torch2")
      ("mode", po::value(&config.mode)->default_value(config.mode), "ops, barrier or idle")
      ("engine", po::value(&config.engine)->default_value(config.engine),
       "ops: threads (a TcpStore per client thread) or evented (one thread, every connection)")
      ("clients", po::value(&config.clients)->default_value(config.clients))
      ("rounds", po::value(&config.rounds)->default_value(config.rounds),
       "set/get/add rounds per client (ops), latency samples (idle)")
      ("idle", po::value(&config.idle)->default_value(config.idle), "idle connections (idle)")
      ("token-file", po::value<std::string>(), "the clients prove this token (threads engine)")
      ("relay-token-file", po::value<std::string>(),
       "the clients go through an in-process LoopbackRelay that proves this token")
      ("relay-handoff", "with --relay-token-file: the relay hands each connection off (needs "
                        "LD_PRELOAD=libddprun-relay-handoff.so)")
      ("floor-proxy", "the clients go through a minimal epoll forwarder in this process (no token)")
      ("serve-floor", "be the floor store instead (floor_store.h): the least a server costs per request")
      ("tls-cert", po::value<std::string>(),
       "with --token-file or --relay-token-file: TLS to the store, trusting this certificate");
  // clang-format on
  try {
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, options), values);
    if (values.count("help")) {
      std::cout << options << "\n";
      return 0;
    }
    if (values.count("serve-floor")) return ddprun::bench::serveFloorStore();
    po::notify(values);
    if (values.count("tls-cert")) {
      config.tls = TlsConfig::load({values["tls-cert"].as<std::string>(), "", ""});
    }
    if (values.count("token-file")) {
      if (config.engine == "evented")
        throw std::runtime_error("--token-file needs --engine threads");
      config.secret = readTokenFile(values["token-file"].as<std::string>());
    }
    std::unique_ptr<FloorProxy> floor;
    if (values.count("floor-proxy")) {
      floor = std::make_unique<FloorProxy>(static_cast<std::uint16_t>(config.port));
      config.host = "127.0.0.1";
      config.port = floor->port();
    }
    std::unique_ptr<HandoffDirectory> handoff;  // outlives the relay, whose socket is in it
    std::unique_ptr<LoopbackRelay> relay;
    if (values.count("relay-token-file")) {
      RelayOptions relayOptions{readTokenFile(values["relay-token-file"].as<std::string>())};
      relayOptions.tls = config.tls;
      if (values.count("relay-handoff")) {
        handoff = std::make_unique<HandoffDirectory>();
        relayOptions.handoffPath = handoff->socket();
      }
      config.tls = nullptr;  // the clients reach the relay in plain TCP, as workers do
      relay = std::make_unique<LoopbackRelay>(std::move(relayOptions));
      relay->setUpstream(config.host, static_cast<std::uint16_t>(config.port));
      config.host = "127.0.0.1";
      config.port = relay->port();
      // What the agent gives its workers; the preloaded shim reads it at each connect().
      if (handoff) ::setenv(DDPRUN_RELAY_HANDOFF_ENV, relay->handoffVariable().c_str(), 1);
    }
    if (values.count("token-file") || values.count("relay-token-file")) {
      // OpenSSL's first random bytes and HMAC load its configuration and seed it (~2 ms): a
      // long-running agent pays that once, at its own first handshake, not per measurement.
      const JobSecret warm =
          readTokenFile(values.count("token-file") ? values["token-file"].as<std::string>()
                                                   : values["relay-token-file"].as<std::string>());
      auth::ClientHandshake client(warm);
      auth::ServerHandshake server(warm);
      std::string proof;
      client.answer(server.challenge(client.hello()).value_or(""), proof);
    }
    if (config.mode == "ops" && config.engine == "evented") {
      benchOpsEvented(config);
    } else if (config.mode == "ops") {
      benchOps(config);
    } else if (config.mode == "barrier" && config.engine == "evented") {
      benchBarrierEvented(config);
    } else if (config.mode == "barrier") {
      benchBarrier(config);
    } else if (config.mode == "idle") {
      benchIdle(config);
    } else {
      throw std::runtime_error("unknown --mode " + config.mode);
    }
    if (handoff && relay->stats().handedOff == 0) {
      throw std::runtime_error(
          "--relay-handoff: no connection was handed off; run with "
          "LD_PRELOAD=<build>/launcher/libddprun-relay-handoff.so");
    }
  } catch (const std::exception& error) {
    std::cerr << "ddprun-store-bench: error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
