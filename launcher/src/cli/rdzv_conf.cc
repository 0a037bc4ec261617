#include "cli/rdzv_conf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <set>
#include <string_view>

#include "cli/cli.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/security_options.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// What each key holds.
enum class ConfKind {
  kSeconds,
  kOptionalSeconds,
  kCount,
  kBoolean,
  kStoreType,
  kIgnored,
  kFile,
  kProtocol,    // protocol: http or https
  kEtcdPrefix,  // etcd_prefix: a key prefix
  kEtcdUser,    // username: the etcd user (its password is in password_file)
  kPassword,    // password: refused, a secret on the command line
};

// Which backends read a key (a set of them). ddprun's static rendezvous runs on the same rounds,
// keep-alives and store as its c10d (one store, hosted by node rank 0), so it reads every key
// c10d reads except is_host: its host is node rank 0 whatever a node says (torch's static backend
// reads no is_host either). `timeout` is the static backend's (torchrun's static rendezvous waits
// that long for the nodes and the master's store) and the legacy etcd backend's (its join
// timeout); c10d reads its join timeout from join_timeout, and torch's c10d never reads `timeout`
// (PyTorch's own launcher test passes a garbled one to c10d). etcd reads what c10d reads but
// is_host (no agent hosts an etcd), plus the keys of torch's two etcd backends, both spellings:
// etcd's (protocol, cacert, cert, key, etcd_prefix, timeout) and etcd-v2's (protocol, ca_cert,
// ssl_cert, ssl_cert_key); and ddprun's own username and password_file for an etcd with auth
// (torch's etcd backends have none). The job's token and TLS files protect the stores ddprun's
// agents host, which with etcd is each round's workers' store (and the relay in front of it).
enum ReadBy : unsigned {
  kStatic = 1U << 0U,
  kC10d = 1U << 1U,
  kEtcd = 1U << 2U,
  kAll = kStatic | kC10d | kEtcd,
};

using Seconds = std::chrono::milliseconds RendezvousSettings::*;
using FilePath = std::string RendezvousSettings::*;

struct ConfKey {
  std::string_view name;
  ConfKind kind;
  unsigned readBy = kAll;
  Seconds seconds = nullptr;        // kSeconds: the field it sets
  FilePath file = nullptr;          // kFile: the field it sets
  std::string_view elsewhere = "";  // not kAll: what the other backends use instead
};

constexpr std::string_view kEtcdOnly = "it is for --rdzv-backend etcd";
constexpr std::string_view kPasswordElsewhere =
    "the etcd backend takes the password of its user as password_file=PATH, never on the "
    "command line";

// `timeout` (the static and etcd backends' join timeout) is resolved by resolveRendezvous.
constexpr ConfKey kRdzvConfKeys[] = {
    {"join_timeout", ConfKind::kSeconds, kAll, &RendezvousSettings::joinTimeout},
    {"last_call_timeout", ConfKind::kSeconds, kAll, &RendezvousSettings::lastCallTimeout},
    {"close_timeout", ConfKind::kSeconds, kAll, &RendezvousSettings::closeTimeout},
    {"heartbeat_timeout", ConfKind::kOptionalSeconds},
    {"keep_alive_interval", ConfKind::kSeconds, kAll, &RendezvousSettings::keepAliveInterval},
    {"keep_alive_max_attempt", ConfKind::kCount},
    {"timeout", ConfKind::kOptionalSeconds, kStatic | kEtcd, nullptr, nullptr,
     "c10d's join timeout is join_timeout"},
    {"read_timeout", ConfKind::kSeconds, kAll, &RendezvousSettings::readTimeout},
    {"is_host", ConfKind::kBoolean, kC10d, nullptr, nullptr,
     "only c10d's agents choose whether to host the rendezvous store: with static, node rank 0 "
     "hosts the store; with etcd, etcd holds the rendezvous"},
    {"store_type", ConfKind::kStoreType},
    {"use_libuv", ConfKind::kIgnored},  // TCPStore flavour in torch; ddprun's store is its own
    // ddprun extra: how long the nodes wait for each other at the end.
    {"exit_barrier_timeout", ConfKind::kSeconds, kAll, &RendezvousSettings::exitBarrierTimeout},
    // ddprun extras: the job's token and TLS files.
    {"token_file", ConfKind::kFile, kAll, nullptr, &RendezvousSettings::tokenFile},
    {"tls_cert", ConfKind::kFile, kAll, nullptr, &RendezvousSettings::tlsCert},
    {"tls_key", ConfKind::kFile, kAll, nullptr, &RendezvousSettings::tlsKey},
    {"tls_ca", ConfKind::kFile, kAll, nullptr, &RendezvousSettings::tlsCa},
    // etcd: torch's etcd (legacy) and etcd-v2 backends' keys.
    {"protocol", ConfKind::kProtocol, kEtcd, nullptr, nullptr, kEtcdOnly},
    {"etcd_prefix", ConfKind::kEtcdPrefix, kEtcd, nullptr, nullptr, kEtcdOnly},
    {"cacert", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdCaCert, kEtcdOnly},
    {"ca_cert", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdCaCert, kEtcdOnly},
    {"cert", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdCert, kEtcdOnly},
    {"ssl_cert", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdCert, kEtcdOnly},
    {"key", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdKey, kEtcdOnly},
    {"ssl_cert_key", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdKey, kEtcdOnly},
    // ddprun extras: an etcd user and the file holding its password.
    {"username", ConfKind::kEtcdUser, kEtcd, nullptr, nullptr, kEtcdOnly},
    {"password_file", ConfKind::kFile, kEtcd, nullptr, &RendezvousSettings::etcdPasswordFile,
     kEtcdOnly},
    {"password", ConfKind::kPassword, kEtcd, nullptr, nullptr, kPasswordElsewhere},
};

unsigned backendBit(RdzvBackend backend) {
  switch (backend) {
    case RdzvBackend::kStatic:
      return kStatic;
    case RdzvBackend::kC10d:
      return kC10d;
    case RdzvBackend::kEtcd:
      return kEtcd;
  }
  return kAll;
}

bool reads(RdzvBackend backend, const ConfKey& key) {
  return (key.readBy & backendBit(backend)) != 0;
}

// A value wrapped in one pair of quotes that no shell removed: "'join_timeout=5,timeout=5'"
// passed from Python, as PyTorch's own launcher test does. torchrun keeps them, so the first key
// and the last value carry a quote; ddprun keeps them too (stripping them would apply settings
// torchrun ignores) and says so.
bool wrappedInQuotes(std::string_view text) {
  text = trim(text);
  return text.size() >= 2 && (text.front() == '\'' || text.front() == '"') &&
         text.back() == text.front();
}

// Where an --rdzv-conf value came from, for messages: the option or variable, and whether the
// quotes around the value are the likely cause.
struct ConfSource {
  const GivenValue& given;
  bool quoted = false;

  std::string where() const {
    if (!quoted) return printable(given.origin);
    return fmt::format("{} (its value is wrapped in quotes no shell removed: drop them)",
                       printable(given.origin));
  }
};

const ConfKey* findConfKey(std::string_view key) {
  const auto known = std::find_if(std::begin(kRdzvConfKeys), std::end(kRdzvConfKeys),
                                  [&](const ConfKey& k) { return k.name == key; });
  return known == std::end(kRdzvConfKeys) ? nullptr : known;
}

std::string knownKeyNames() {
  std::string names;
  for (const auto& k : kRdzvConfKeys) names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

// The range of a duration key, in seconds. Every duration is held in whole milliseconds, so none
// is below 1 ms (a keep-alive interval of 0 ms would divide by zero and spin). keep_alive_interval
// is an hour at most: times keep_alive_max_attempt (up to 1000000) it is the liveness timeout,
// which must still fit a clock's nanoseconds.
struct SecondsRange {
  double least = 0.001;
  double most = kMaxSeconds;
  std::string_view example = "60";
};

SecondsRange secondsRange(std::string_view key) {
  if (key == "keep_alive_interval") return {0.001, 3600, "1"};
  return {};
}

std::chrono::milliseconds secondsValue(const ConfSource& source, std::string_view key,
                                       std::string_view value) {
  const SecondsRange range = secondsRange(key);
  const auto seconds = parseFiniteNumber(value);
  if (!seconds || *seconds <= 0) {
    throw UsageError(fmt::format("{}: {} is not a positive number of seconds; e.g. {}={}",
                                 source.where(), quote(fmt::format("{}={}", key, value)), key,
                                 range.example));
  }
  if (*seconds < range.least || *seconds > range.most) {
    throw UsageError(fmt::format(
        "{}: {} is outside {}'s range, {:.10g} to {:.10g} seconds; e.g. {}={}", source.where(),
        quote(fmt::format("{}={}", key, value)), key, range.least, range.most, key, range.example));
  }
  return std::chrono::milliseconds(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(*seconds * 1000)));
}

int countValue(const ConfSource& source, std::string_view key, std::string_view value) {
  const auto count = parseWholeNumber(value);
  if (!count || *count < 1) {
    throw UsageError(fmt::format("{}: {} is not a whole number >= 1; e.g. {}=3", source.where(),
                                 quote(fmt::format("{}={}", key, value)), key));
  }
  return static_cast<int>(std::min<long long>(*count, 1000000));
}

bool booleanValue(const ConfSource& source, std::string_view key, std::string_view value) {
  const std::string word = lowerCase(value);
  if (word == "1" || word == "true" || word == "t" || word == "yes" || word == "y") return true;
  if (word == "0" || word == "false" || word == "f" || word == "no" || word == "n") return false;
  throw UsageError(fmt::format("{}: {} is not a boolean; use {}=true or {}=false", source.where(),
                               quote(fmt::format("{}={}", key, value)), key, key));
}

// store_type: only tcp, the one store ddprun has.
void checkStoreType(const ConfSource& source, std::string_view value) {
  const std::string type = lowerCase(value);
  if (type == "tcp") return;
  if (type == "file") {
    throw UsageError(fmt::format(
        "{}: store_type=file (a FileStore on a shared file system) is not supported by ddprun; "
        "drop it or use store_type=tcp",
        source.where()));
  }
  throw UsageError(fmt::format("{}: unknown store_type {}; ddprun supports store_type=tcp",
                               source.where(), quote(value)));
}

// protocol: http or https, any case (torch's etcd-v2 backend strips and lowers it too).
bool protocolValue(const ConfSource& source, std::string_view value) {
  const std::string protocol = lowerCase(value);
  if (protocol == "http" || protocol == "https") return protocol == "https";
  throw UsageError(fmt::format("{}: protocol={} is not http or https; e.g. protocol=https",
                               source.where(), printable(value)));
}

// etcd_prefix: the key prefix, visible ASCII only (a key's bytes end up in etcd, in log lines
// and in etcdctl commands an operator types). torch's legacy default is /torchelastic/p2p.
std::string etcdPrefixValue(const ConfSource& source, std::string_view value) {
  const bool visible = std::all_of(value.begin(), value.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (!visible) {
    throw UsageError(
        fmt::format("{}: etcd_prefix {} has a space or a byte that is not visible "
                    "ASCII; e.g. etcd_prefix=/torchelastic/p2p",
                    source.where(), quote(value)));
  }
  return std::string(value);
}

// Two spellings of one etcd file (cacert and ca_cert, ...) that name different files: which one
// was meant cannot be guessed.
void checkOneFile(const ConfSource& source, const ConfKey& known, std::string_view value,
                  RdzvConf& conf) {
  const std::string& already = conf.settings.*known.file;
  if (already.empty() || already == value) return;
  for (const ConfKey& other : kRdzvConfKeys) {
    if (other.file != known.file || other.name == known.name) continue;
    throw UsageError(fmt::format("{}: {} and {} name the same file, given as {} and {}; give one",
                                 source.where(), other.name, known.name, quote(already),
                                 quote(value)));
  }
}

// One key=value, of a key the backend reads, into `conf`: checked strictly.
void applyRdzvConfValue(const ConfSource& source, const ConfKey& known, std::string_view value,
                        RdzvConf& conf) {
  const std::string_view key = known.name;
  RendezvousSettings& settings = conf.settings;
  switch (known.kind) {
    case ConfKind::kSeconds:
      settings.*known.seconds = secondsValue(source, key, value);
      conf.joinTimeoutGiven = conf.joinTimeoutGiven || key == "join_timeout";
      return;
    case ConfKind::kOptionalSeconds:
      (key == "timeout" ? conf.timeout : settings.heartbeatTimeout) =
          secondsValue(source, key, value);
      return;
    case ConfKind::kCount:
      settings.keepAliveMaxAttempts = countValue(source, key, value);
      return;
    case ConfKind::kBoolean:
      settings.isHost = booleanValue(source, key, value);
      return;
    case ConfKind::kStoreType:
      checkStoreType(source, value);
      return;
    case ConfKind::kIgnored:
      return;
    case ConfKind::kFile:
      // Read (and a secret's mode checked) by the agent when it starts: one place reads them.
      checkOneFile(source, known, value, conf);
      settings.*known.file = std::string(value);
      return;
    case ConfKind::kProtocol:
      settings.etcdHttps = protocolValue(source, value);
      return;
    case ConfKind::kEtcdPrefix:
      settings.etcdPrefix = etcdPrefixValue(source, value);
      return;
    case ConfKind::kEtcdUser:
      settings.etcdUser = std::string(value);
      return;
    case ConfKind::kPassword:
      // Refused whatever follows: ps shows every process's arguments to every user of the host,
      // and a job's command line ends up in logs and shell histories. Its value is not repeated.
      throw UsageError(fmt::format(
          "{}: password= would show the etcd password to every user of this host (ps lists "
          "command lines); write it to a file only you can read (chmod 600) and give "
          "password_file=PATH",
          source.where()));
  }
}

// The token and TLS files make sense only together. One function, so that the shared check from
// rendezvous/ can replace it as a whole; its messages are what users see today.
// One rule for every program that takes the job's token and TLS files (security_options.h):
// TLS needs the token, and every agent needs both tls_cert and tls_key (any may host a store).
void checkTokenAndTls(const RendezvousSettings& s, const GivenValue& given) {
  const rendezvous::JobSecurityFiles files{s.tokenFile, {s.tlsCert, s.tlsKey, s.tlsCa}};
  if (auto problem = rendezvous::securityOptionsProblem(files, rendezvous::kAgentSecurityOptions)) {
    throw UsageError(fmt::format("{}: {}", printable(given.origin), *problem));
  }
}

// etcd's client certificate comes with its key (torch passes the pair as one `cert` tuple, or the
// certificate alone as a file holding both, which etcd's TLS client here cannot take).
void checkEtcdClientCertificate(const RendezvousSettings& s, const GivenValue& given) {
  if (s.etcdCert.empty() == s.etcdKey.empty()) return;
  throw UsageError(fmt::format(
      "{}: etcd's client certificate needs its key: give both cert=PATH and key=PATH (or "
      "ssl_cert=PATH and ssl_cert_key=PATH)",
      printable(given.origin)));
}

// An etcd user needs its password and the reverse: either alone cannot log in.
void checkEtcdUser(const RendezvousSettings& s, const GivenValue& given) {
  if (s.etcdUser.empty() == s.etcdPasswordFile.empty()) return;
  throw UsageError(fmt::format(
      "{}: {}; an etcd with auth enabled needs both: username=NAME,password_file=PATH (the "
      "password alone in the file, mode 600)",
      printable(given.origin),
      s.etcdUser.empty() ? "password_file is given without username"
                         : "username is given without password_file"));
}

// The fence (RendezvousSettings::fencingInterval) must leave the heartbeat at least one renewal
// before it fires, or a node would stop its workers between two healthy renewals.
void checkFencing(const RendezvousSettings& s, const GivenValue& given) {
  const auto fence = s.fencingInterval();
  if (fence > s.keepAliveInterval) return;
  const auto slack = 2 * RendezvousSettings::kFenceRoundTrip + RendezvousSettings::kFenceMargin;
  // The least keep_alive_max_attempt that gives a fence longer than one interval.
  // keep_alive_interval is at least 1 ms (secondsValue); the divisor is kept >= 1 here as well.
  const long interval = std::max<long>(1, s.keepAliveInterval.count());
  const long attempts = (s.keepAliveInterval + slack).count() / interval + 1;
  throw UsageError(fmt::format(
      "{}: keep_alive_interval={} s x keep_alive_max_attempt={} make a {} s liveness timeout, and "
      "a node fences itself (stops its workers) {} s before it: after {} s without an acknowledged "
      "renewal, no longer than one keep-alive interval; raise keep_alive_max_attempt (e.g. to {})",
      printable(given.origin), s.keepAliveInterval.count() / 1000.0, s.keepAliveMaxAttempts,
      s.holdTimeToLive().count() / 1000.0, slack.count() / 1000.0, fence.count() / 1000.0,
      attempts));
}

// One line for a key the backend does not read: unknown to ddprun, or the other backend's.
std::string ignoredKeyWarning(const GivenValue& given, std::string_view key, const ConfKey* known,
                              RdzvBackend backend) {
  if (known == nullptr) {
    return fmt::format("{}: unknown key {} ignored (ddprun knows {})", printable(given.origin),
                       quote(key), knownKeyNames());
  }
  return fmt::format("{}: {} is not read by the {} backend; ignored ({})", printable(given.origin),
                     key, rdzvBackendName(backend), known->elsewhere);
}

}  // namespace

RdzvConf parseRdzvConf(const GivenValue& given, RdzvBackend backend,
                       std::vector<std::string>& warnings) {
  RdzvConf conf;
  if (trim(given.value).empty()) return conf;
  const ConfSource source{given, wrappedInQuotes(given.value)};
  if (source.quoted) {
    warnings.push_back(fmt::format(
        "{} is wrapped in quotes that no shell removed; as with torchrun they stay part of the "
        "first key and the last value: drop them",
        label(given)));
  }
  std::set<std::string, std::less<>> warned;  // each ignored key once
  for (const auto item : split(given.value, ',')) {
    if (trim(item).empty()) continue;
    const auto equals = item.find('=');
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : trim(item.substr(equals + 1));
    if (key.empty()) {
      throw UsageError(fmt::format("{}: entry {} has no key; write key=value,key=value, e.g. {}",
                                   source.where(), quote(item),
                                   example(given, "join_timeout=600")));
    }
    if (value.empty()) {
      throw UsageError(fmt::format("{}: key {} has no value; write {}=VALUE", source.where(),
                                   quote(key), printable(key)));
    }
    const ConfKey* known = findConfKey(key);
    if (known != nullptr && reads(backend, *known)) {
      applyRdzvConfValue(source, *known, value, conf);
    } else if (warned.insert(std::string(key)).second) {
      warnings.push_back(ignoredKeyWarning(given, key, known, backend));
    }
  }
  checkTokenAndTls(conf.settings, given);
  checkEtcdClientCertificate(conf.settings, given);
  checkEtcdUser(conf.settings, given);
  checkFencing(conf.settings, given);
  return conf;
}

}  // namespace ddprun::launcher::cli_detail
