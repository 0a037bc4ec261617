// ddprun-rendezvous: the rendezvous store as a standalone daemon.
//
// Prints one line "listening on HOST:PORT" on stdout once it accepts connections (with --port 0
// that is how callers learn the port), logs to stderr, and exits 0 on SIGTERM or SIGINT after
// closing every connection. Bad arguments and addresses it cannot listen on exit 2 with one line.
// With --health-port it also serves GET /healthz and GET /metrics (daemon_health.h) and prints a
// second line "health on HOST:PORT".
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "daemon_health.h"
#include "ddprun/common/descriptor_limit.h"
#include "ddprun/rendezvous/security_options.h"
#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/server_limits.h"

namespace po = boost::program_options;
using ddprun::rendezvous::DaemonHealth;
using ddprun::rendezvous::HealthServerError;
using ddprun::rendezvous::kDaemonSecurityOptions;
using ddprun::rendezvous::openStoreWarning;
using ddprun::rendezvous::RendezvousServer;
using ddprun::rendezvous::ServerError;
using ddprun::rendezvous::ServerLimits;
using ddprun::rendezvous::serverLimitsProblem;
using ddprun::rendezvous::ServerOptions;
using ddprun::rendezvous::storeSecurityNote;

namespace {

constexpr const char* kProgram = "ddprun-rendezvous";
constexpr int kUsageError = 2;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Parsed {
  ServerOptions server;
  // The token and TLS as loaded, also in `server`: for the log lines about the store's security.
  ddprun::rendezvous::JobSecurity security;
  spdlog::level::level_enum logLevel = spdlog::level::info;
  // --health-port, --health-addr, --health-hosts: GET /healthz, when a port is given.
  std::optional<ddprun::rendezvous::HealthServerOptions> health;
  bool exitNow = false;
};

Parsed parse(int argc, char** argv) {
  Parsed parsed;
  ServerOptions& o = parsed.server;
  int port = o.port;
  int healthPort = -1;
  std::string healthAddr = "127.0.0.1";
  std::string healthHosts;
  std::string logLevel = "info";
  ddprun::rendezvous::JobSecurityFiles security;
  // Read as ServerLimits (signed counts, seconds as real numbers): a negative number is an error
  // rather than 2^64 - 1, and serverLimitsProblem() checks them as every server's limits.
  ServerLimits limits = ServerLimits::of(o);

  po::options_description options(fmt::format(
      "Usage: {} [--host H] [--port P] [options]\n\n"
      "The ddprun rendezvous store: a TCP key-value store that speaks PyTorch's c10d TCPStore\n"
      "protocol (torch 1.13 and 2.x clients on the same port). Prints \"listening on HOST:PORT\"\n"
      "when ready; SIGTERM or SIGINT stops it cleanly.\n\nOptions",
      kProgram));
  // clang-format off
  options.add_options()
      ("help,h", "show this help and exit")
      ("version", "show the version and exit")
      ("host", po::value(&o.host)->default_value(o.host),
       "the one address to listen on (0.0.0.0 for every IPv4 interface)")
      ("port", po::value(&port)->default_value(port), "TCP port; 0 picks a free one")
      ("max-connections", po::value(&limits.maxConnections)->default_value(limits.maxConnections),
       "connections beyond this are closed at once")
      ("max-key-bytes", po::value(&limits.maxKeyBytes)->default_value(limits.maxKeyBytes),
       "longest key a request may carry")
      ("max-value-bytes", po::value(&limits.maxValueBytes)->default_value(limits.maxValueBytes),
       "largest value a request may carry")
      ("max-keys-per-request",
       po::value(&limits.maxKeysPerRequest)->default_value(limits.maxKeysPerRequest),
       "most keys one CHECK/WAIT/MULTI_GET/MULTI_SET may name")
      ("max-request-bytes",
       po::value(&limits.maxRequestBytes)->default_value(limits.maxRequestBytes),
       "the keys and values of one request together (never below one value and its key); a "
       "request announcing more closes its connection before the bytes arrive")
      ("max-stored-bytes", po::value(&limits.maxStoredBytes)->default_value(limits.maxStoredBytes),
       "the most data the store holds (keys, values, queues, each with ~192 bytes of bookkeeping); "
       "a write beyond it closes the writer's connection")
      ("max-pending-reply-bytes",
       po::value(&limits.maxTotalPendingReplyBytes)->default_value(limits.maxTotalPendingReplyBytes),
       "the most reply bytes waiting for their readers, all connections together; beyond it, "
       "connections with replies waiting take no new requests until the total falls")
      ("partial-request-timeout",
       po::value(&limits.partialRequestTimeoutSeconds)
           ->default_value(limits.partialRequestTimeoutSeconds),
       "seconds a connection may sit on half a request before it is closed")
      ("write-stall-timeout",
       po::value(&limits.writeStallTimeoutSeconds)->default_value(limits.writeStallTimeoutSeconds),
       "seconds a connection may leave its replies unread before it is closed")
      ("keepalive-idle",
       po::value(&limits.keepAliveIdleSeconds)->default_value(limits.keepAliveIdleSeconds),
       "seconds of silence before TCP keep-alive probes check that the peer still exists (0: off)")
      ("keepalive-interval",
       po::value(&limits.keepAliveIntervalSeconds)->default_value(limits.keepAliveIntervalSeconds),
       "seconds between keep-alive probes")
      ("keepalive-probes", po::value(&limits.keepAliveProbes)->default_value(limits.keepAliveProbes),
       "unanswered probes after which the connection is dropped")
      ("token-file", po::value(&security.tokenFile),
       "file with the job's token (mode 600): every client must prove it holds the same token "
       "(agents: --rdzv-conf token_file=PATH); without it the store is open to anyone who reaches it")
      ("tls-cert", po::value(&security.tls.certificate),
       "with --token-file: serve TLS with this certificate (PEM); agents check it against "
       "--rdzv-conf tls_ca, or take it as its own CA")
      ("tls-key", po::value(&security.tls.privateKey),
       "the certificate's private key (PEM, mode 600)")
      ("handshake-timeout",
       po::value(&limits.handshakeTimeoutSeconds)->default_value(limits.handshakeTimeoutSeconds),
       "with --token-file: seconds a new connection has to prove the token before it is closed")
      ("max-pending-handshakes",
       po::value(&limits.maxPendingHandshakes)->default_value(limits.maxPendingHandshakes),
       "with --token-file: connections still proving the token at most; a new one closes the oldest")
      ("health-port", po::value(&healthPort),
       "also serve HTTP GET /healthz on this port (0 picks a free one, printed as \"health on "
       "HOST:PORT\"): 200 with the daemon's state as JSON while it serves, 503 once it shuts down; "
       "and GET /metrics: the same and the requests served per op, for Prometheus")
      ("health-addr", po::value(&healthAddr)->default_value(healthAddr),
       "with --health-port: the address /healthz and /metrics listen on (loopback unless widened)")
      ("health-hosts", po::value(&healthHosts),
       "with --health-port: host names (comma-separated) a request's Host header may give besides "
       "the bound address (a wildcard bind takes any IP address; other names are refused)")
      ("log-level", po::value(&logLevel)->default_value(logLevel),
       "trace, debug, info, warn, error or off");
  // clang-format on

  po::variables_map values;
  try {
    const po::parsed_options given = po::command_line_parser(argc, argv).options(options).run();
    // Positional words are no option of ours; Program_options would drop them silently (a
    // `ddprun-rendezvous 29401` would listen on the default port instead).
    for (const std::string& word :
         po::collect_unrecognized(given.options, po::include_positional)) {
      const bool number =
          !word.empty() && word.find_first_not_of("0123456789") == std::string::npos;
      throw UsageError(
          number ? fmt::format("unexpected argument '{}'; give the port as --port {}", word, word)
                 : fmt::format("unexpected argument '{}'", word));
    }
    po::store(given, values);
    po::notify(values);
  } catch (const po::error& error) {
    throw UsageError(error.what());
  }
  if (values.count("help")) {
    std::cout << options << "\n";
    parsed.exitNow = true;
    return parsed;
  }
  if (values.count("version")) {
    std::cout << kProgram << " " << DDPRUN_VERSION << "\n";
    parsed.exitNow = true;
    return parsed;
  }
  if (port < 0 || port > 65535) throw UsageError(fmt::format("--port {} is not in 0..65535", port));
  o.port = static_cast<std::uint16_t>(port);
  if (values.count("health-port")) {
    if (healthPort < 0 || healthPort > 65535) {
      throw UsageError(fmt::format("--health-port {} is not in 0..65535", healthPort));
    }
    parsed.health.emplace();
    parsed.health->port = static_cast<std::uint16_t>(healthPort);
    parsed.health->host = healthAddr;
    try {
      parsed.health->hostNames = ddprun::rendezvous::parseHealthHostNames(healthHosts);
    } catch (const HealthServerError& error) {
      throw UsageError(fmt::format("--health-hosts: {}", error.what()));
    }
  } else if (!values["health-addr"].defaulted()) {
    throw UsageError("--health-addr needs --health-port");
  } else if (values.count("health-hosts")) {
    throw UsageError("--health-hosts needs --health-port");
  }
  if (auto problem = serverLimitsProblem(limits)) throw UsageError(*problem);
  limits.applyTo(o);
  // An empty path is how JobSecurityFiles says "not given": `--token-file ""` must not quietly
  // leave the store open.
  for (const char* option : {"token-file", "tls-cert", "tls-key"}) {
    if (values.count(option) && values[option].as<std::string>().empty()) {
      throw UsageError(fmt::format("--{} '' names no file; give the file's path", option));
    }
  }
  try {
    parsed.security = ddprun::rendezvous::loadJobSecurity(security, kDaemonSecurityOptions);
  } catch (const ddprun::rendezvous::JobSecurityError& error) {
    throw UsageError(error.what());
  }
  o.secret = parsed.security.secret;
  o.tls = parsed.security.tls;
  parsed.logLevel = spdlog::level::from_str(logLevel);
  if (parsed.logLevel == spdlog::level::off && logLevel != "off") {
    throw UsageError(fmt::format(
        "--log-level '{}' is not one of trace, debug, info, warn, error, off", logLevel));
  }
  return parsed;
}

}  // namespace

int main(int argc, char** argv) {
  Parsed parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << kProgram << ": error: " << error.what() << " (see --help)\n";
    return kUsageError;
  }
  if (parsed.exitNow) return 0;

  auto logger = spdlog::stderr_color_mt(kProgram);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(parsed.logLevel);
  spdlog::set_default_logger(logger);

  // Signals are taken synchronously by this thread; the serving thread inherits the blocked mask.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGINT);
  sigaddset(&stopSignals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  ddprun::common::raiseDescriptorLimit();

  try {
    RendezvousServer server(parsed.server);
    // Bound before anything is printed, so that a bad --health-addr or a taken --health-port is
    // the one line; in this thread's blocked signal mask, which the health thread inherits.
    std::optional<DaemonHealth> health;
    if (parsed.health) health.emplace(*parsed.health, server, DDPRUN_VERSION);
    server.start();
    std::printf("listening on %s\n", server.address().c_str());
    std::fflush(stdout);
    spdlog::info("listening on {} (max {} connections{})", server.address(),
                 parsed.server.maxConnections, storeSecurityNote(parsed.security));
    if (auto warning =
            openStoreWarning("the rendezvous store", parsed.server.host, server.address(),
                             parsed.security, kDaemonSecurityOptions)) {
      spdlog::warn("{}", *warning);
    }
    // After the store's line, which callers read the port from.
    if (health) {
      std::printf("health on %s\n", health->address().c_str());
      std::fflush(stdout);
      spdlog::info("serving /healthz on http://{}/healthz", health->address());
    }
    int signal = 0;
    sigwait(&stopSignals, &signal);
    spdlog::info("received {}, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
    if (health) health->drain();  // 503 from now on
    server.stop();
  } catch (const HealthServerError& error) {
    std::cerr << kProgram << ": error: --health-port: " << error.what() << "\n";
    return kUsageError;
  } catch (const ServerError& error) {
    std::cerr << kProgram << ": error: " << error.what() << "\n";
    return kUsageError;
  } catch (const std::exception& error) {
    std::cerr << kProgram << ": error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
