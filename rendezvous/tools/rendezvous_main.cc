// ddprun-rendezvous: the rendezvous store as a standalone daemon.
//
// Prints one line "listening on HOST:PORT" on stdout once it accepts connections (with --port 0
// that is how callers learn the port), logs to stderr, and exits 0 on SIGTERM or SIGINT after
// closing every connection. Bad arguments and addresses it cannot listen on exit 2 with one line.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <boost/program_options.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "ddprun/common/descriptor_limit.h"
#include "ddprun/common/local_address.h"
#include "ddprun/rendezvous/server.h"
#include "ddprun/rendezvous/tls.h"

namespace po = boost::program_options;
using ddprun::rendezvous::RendezvousServer;
using ddprun::rendezvous::ServerError;
using ddprun::rendezvous::ServerOptions;

namespace {

constexpr const char* kProgram = "ddprun-rendezvous";
constexpr int kUsageError = 2;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::chrono::milliseconds seconds(double value, const char* option) {
  if (!(value > 0)) throw UsageError(fmt::format("--{} must be a positive number of seconds", option));
  return std::chrono::milliseconds(static_cast<std::int64_t>(value * 1000));
}

struct Parsed {
  ServerOptions server;
  spdlog::level::level_enum logLevel = spdlog::level::info;
  bool exitNow = false;
};

Parsed parse(int argc, char** argv) {
  Parsed parsed;
  ServerOptions& o = parsed.server;
  int port = o.port;
  std::string logLevel = "info";
  std::string tokenFile;
  ddprun::rendezvous::TlsFiles tls;
  double handshakeTimeout = static_cast<double>(o.handshakeTimeout.count()) / 1000;
  double partialTimeout = static_cast<double>(o.partialRequestTimeout.count()) / 1000;
  double writeStallTimeout = static_cast<double>(o.writeStallTimeout.count()) / 1000;
  long keepAliveIdle = o.keepAliveIdle.count();
  long keepAliveInterval = o.keepAliveInterval.count();
  // Every count is read signed, so that a negative number is an error rather than 2^64 - 1.
  auto maxConnections = static_cast<long long>(o.maxConnections);
  auto maxKeyBytes = static_cast<long long>(o.limits.maxKeyBytes);
  auto maxValueBytes = static_cast<long long>(o.limits.maxValueBytes);
  auto maxKeysPerRequest = static_cast<long long>(o.limits.maxKeysPerRequest);
  auto maxRequestBytes = static_cast<long long>(o.limits.maxRequestBytes);
  auto maxPendingHandshakes = static_cast<long long>(o.maxPendingHandshakes);
  auto maxStoredBytes = static_cast<long long>(o.maxStoredBytes);
  auto maxPendingReplyBytes = static_cast<long long>(o.maxTotalPendingReplyBytes);

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
      ("max-connections", po::value(&maxConnections)->default_value(maxConnections),
       "connections beyond this are closed at once")
      ("max-key-bytes", po::value(&maxKeyBytes)->default_value(maxKeyBytes),
       "longest key a request may carry")
      ("max-value-bytes", po::value(&maxValueBytes)->default_value(maxValueBytes),
       "largest value a request may carry")
      ("max-keys-per-request",
       po::value(&maxKeysPerRequest)->default_value(maxKeysPerRequest),
       "most keys one CHECK/WAIT/MULTI_GET/MULTI_SET may name")
      ("max-request-bytes", po::value(&maxRequestBytes)->default_value(maxRequestBytes),
       "the keys and values of one request together (never below one value and its key); a "
       "request announcing more closes its connection before the bytes arrive")
      ("max-stored-bytes", po::value(&maxStoredBytes)->default_value(maxStoredBytes),
       "the most data the store holds (keys, values, queues, each with ~128 bytes of bookkeeping); "
       "a write beyond it closes the writer's connection")
      ("max-pending-reply-bytes",
       po::value(&maxPendingReplyBytes)->default_value(maxPendingReplyBytes),
       "the most reply bytes waiting for their readers, all connections together; beyond it, "
       "connections with replies waiting take no new requests until the total falls")
      ("partial-request-timeout", po::value(&partialTimeout)->default_value(partialTimeout),
       "seconds a connection may sit on half a request before it is closed")
      ("write-stall-timeout", po::value(&writeStallTimeout)->default_value(writeStallTimeout),
       "seconds a connection may leave its replies unread before it is closed")
      ("keepalive-idle", po::value(&keepAliveIdle)->default_value(keepAliveIdle),
       "seconds of silence before TCP keep-alive probes check that the peer still exists (0: off)")
      ("keepalive-interval", po::value(&keepAliveInterval)->default_value(keepAliveInterval),
       "seconds between keep-alive probes")
      ("keepalive-probes", po::value(&o.keepAliveProbes)->default_value(o.keepAliveProbes),
       "unanswered probes after which the connection is dropped")
      ("token-file", po::value(&tokenFile),
       "file with the job's token (mode 600): every client must prove it holds the same token "
       "(agents: --rdzv-conf token_file=PATH); without it the store is open to anyone who reaches it")
      ("tls-cert", po::value(&tls.certificate),
       "with --token-file: serve TLS with this certificate (PEM); agents check it against "
       "--rdzv-conf tls_ca, or take it as its own CA")
      ("tls-key", po::value(&tls.privateKey), "the certificate's private key (PEM, mode 600)")
      ("handshake-timeout", po::value(&handshakeTimeout)->default_value(handshakeTimeout),
       "with --token-file: seconds a new connection has to prove the token before it is closed")
      ("max-pending-handshakes",
       po::value(&maxPendingHandshakes)->default_value(maxPendingHandshakes),
       "with --token-file: connections still proving the token at most; a new one closes the oldest")
      ("log-level", po::value(&logLevel)->default_value(logLevel),
       "trace, debug, info, warn, error or off");
  // clang-format on

  po::variables_map values;
  try {
    const po::parsed_options given = po::command_line_parser(argc, argv).options(options).run();
    // Positional words are no option of ours; Program_options would drop them silently (a
    // `ddprun-rendezvous 29401` would listen on the default port instead).
    for (const std::string& word : po::collect_unrecognized(given.options, po::include_positional)) {
      const bool number = !word.empty() && word.find_first_not_of("0123456789") == std::string::npos;
      throw UsageError(number ? fmt::format("unexpected argument '{}'; give the port as --port {}", word, word)
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
  const auto positive = [](long long given, const char* option) {
    if (given < 1) throw UsageError(fmt::format("--{} {} must be at least 1", option, given));
    return static_cast<std::size_t>(given);
  };
  o.maxConnections = positive(maxConnections, "max-connections");
  o.limits.maxKeyBytes = positive(maxKeyBytes, "max-key-bytes");
  o.limits.maxValueBytes = positive(maxValueBytes, "max-value-bytes");
  o.limits.maxKeysPerRequest = positive(maxKeysPerRequest, "max-keys-per-request");
  o.limits.maxRequestBytes = positive(maxRequestBytes, "max-request-bytes");
  o.maxPendingHandshakes = positive(maxPendingHandshakes, "max-pending-handshakes");
  // Either budget below one value would refuse (or hold back) the values the limits allow.
  const auto atLeastOneValue = [&o](long long given, const char* option) {
    if (given < 0 || static_cast<unsigned long long>(given) < o.limits.maxValueBytes) {
      throw UsageError(fmt::format("--{} {} is less than --max-value-bytes {}: give at least {}",
                                   option, given, o.limits.maxValueBytes, o.limits.maxValueBytes));
    }
    return static_cast<std::size_t>(given);
  };
  o.maxStoredBytes = atLeastOneValue(maxStoredBytes, "max-stored-bytes");
  o.maxTotalPendingReplyBytes = atLeastOneValue(maxPendingReplyBytes, "max-pending-reply-bytes");
  o.partialRequestTimeout = seconds(partialTimeout, "partial-request-timeout");
  o.writeStallTimeout = seconds(writeStallTimeout, "write-stall-timeout");
  if (keepAliveIdle < 0 || keepAliveInterval < 1 || o.keepAliveProbes < 1) {
    throw UsageError("--keepalive-idle must be >= 0, --keepalive-interval and --keepalive-probes >= 1");
  }
  o.keepAliveIdle = std::chrono::seconds(keepAliveIdle);
  o.keepAliveInterval = std::chrono::seconds(keepAliveInterval);
  o.handshakeTimeout = seconds(handshakeTimeout, "handshake-timeout");
  if (values.count("token-file")) {
    try {
      o.secret = ddprun::rendezvous::readTokenFile(tokenFile);
    } catch (const ddprun::rendezvous::TokenFileError& error) {
      throw UsageError(error.what());
    }
  }
  if (!tls.certificate.empty() || !tls.privateKey.empty()) {
    if (!o.secret) throw UsageError("TLS needs the job's token too; add --token-file FILE");
    if (tls.certificate.empty() || tls.privateKey.empty()) {
      throw UsageError("give both --tls-cert and --tls-key");
    }
    try {
      o.tls = ddprun::rendezvous::TlsConfig::load(tls);
    } catch (const ddprun::rendezvous::TlsError& error) {
      throw UsageError(error.what());
    }
  }
  parsed.logLevel = spdlog::level::from_str(logLevel);
  if (parsed.logLevel == spdlog::level::off && logLevel != "off") {
    throw UsageError(fmt::format("--log-level '{}' is not one of trace, debug, info, warn, error, off",
                                 logLevel));
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
    server.start();
    std::printf("listening on %s\n", server.address().c_str());
    std::fflush(stdout);
    spdlog::info("listening on {} (max {} connections{})", server.address(),
                 parsed.server.maxConnections,
                 parsed.server.tls      ? "; TLS, and clients must prove the token"
                 : parsed.server.secret ? "; clients must prove the token"
                                        : "");
    if (!parsed.server.secret && !ddprun::common::isLoopbackAddress(parsed.server.host)) {
      spdlog::warn("listening on {} without a token: anyone who reaches this port can read and "
                   "change every job's rendezvous; give --token-file (and the agents "
                   "--rdzv-conf token_file=) on a network you do not trust",
                   server.address());
    }
    int signal = 0;
    sigwait(&stopSignals, &signal);
    spdlog::info("received {}, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  } catch (const ServerError& error) {
    std::cerr << kProgram << ": error: " << error.what() << "\n";
    return kUsageError;
  } catch (const std::exception& error) {
    std::cerr << kProgram << ": error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
