#include "cli/rdzv_conf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "cli/cli.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {
namespace {

using common::printable;

// What each key holds.
enum class ConfKind { kSeconds, kOptionalSeconds, kCount, kBoolean, kStoreType, kIgnored, kFile };

using Seconds = std::chrono::milliseconds RendezvousSettings::*;
using FilePath = std::string RendezvousSettings::*;

struct ConfKey {
  std::string_view name;
  ConfKind kind;
  Seconds seconds = nullptr;  // kSeconds: the field it sets
  FilePath file = nullptr;    // kFile: the field it sets
};

// `timeout` (the static backend's join timeout) is handled by resolveRendezvous.
constexpr ConfKey kRdzvConfKeys[] = {
    {"join_timeout", ConfKind::kSeconds, &RendezvousSettings::joinTimeout},
    {"last_call_timeout", ConfKind::kSeconds, &RendezvousSettings::lastCallTimeout},
    {"close_timeout", ConfKind::kSeconds, &RendezvousSettings::closeTimeout},
    {"heartbeat_timeout", ConfKind::kOptionalSeconds},
    {"keep_alive_interval", ConfKind::kSeconds, &RendezvousSettings::keepAliveInterval},
    {"keep_alive_max_attempt", ConfKind::kCount},
    {"timeout", ConfKind::kOptionalSeconds},
    {"read_timeout", ConfKind::kSeconds, &RendezvousSettings::readTimeout},
    {"is_host", ConfKind::kBoolean},
    {"store_type", ConfKind::kStoreType},
    {"use_libuv", ConfKind::kIgnored},  // TCPStore flavour in torch; ddprun's store is its own
    // ddprun extra: how long the nodes wait for each other at the end.
    {"exit_barrier_timeout", ConfKind::kSeconds, &RendezvousSettings::exitBarrierTimeout},
    // ddprun extras: the job's token and TLS files.
    {"token_file", ConfKind::kFile, nullptr, &RendezvousSettings::tokenFile},
    {"tls_cert", ConfKind::kFile, nullptr, &RendezvousSettings::tlsCert},
    {"tls_key", ConfKind::kFile, nullptr, &RendezvousSettings::tlsKey},
    {"tls_ca", ConfKind::kFile, nullptr, &RendezvousSettings::tlsCa},
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

std::chrono::milliseconds secondsValue(const GivenValue& given, std::string_view key,
                                       std::string_view value) {
  const auto seconds = parseFiniteNumber(value);
  if (!seconds || *seconds <= 0) {
    throw UsageError(fmt::format("{}: {} is not a positive number of seconds; e.g. {}=60",
                                 printable(given.origin), quote(fmt::format("{}={}", key, value)),
                                 key));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(*seconds * 1000));
}

int countValue(const GivenValue& given, std::string_view key, std::string_view value) {
  const auto count = parseWholeNumber(value);
  if (!count || *count < 1) {
    throw UsageError(fmt::format("{}: {} is not a whole number >= 1; e.g. {}=3",
                                 printable(given.origin), quote(fmt::format("{}={}", key, value)),
                                 key));
  }
  return static_cast<int>(std::min<long long>(*count, 1000000));
}

bool booleanValue(const GivenValue& given, std::string_view key, std::string_view value) {
  const std::string word = lowerCase(value);
  if (word == "1" || word == "true" || word == "t" || word == "yes" || word == "y") return true;
  if (word == "0" || word == "false" || word == "f" || word == "no" || word == "n") return false;
  throw UsageError(fmt::format("{}: {} is not a boolean; use {}=true or {}=false",
                               printable(given.origin), quote(fmt::format("{}={}", key, value)),
                               key, key));
}

// store_type: only tcp, the one store ddprun has.
void checkStoreType(const GivenValue& given, std::string_view value) {
  const std::string type = lowerCase(value);
  if (type == "tcp") return;
  if (type == "file") {
    throw UsageError(fmt::format(
        "{}: store_type=file (a FileStore on a shared file system) is not supported by ddprun; "
        "drop it or use store_type=tcp",
        printable(given.origin)));
  }
  throw UsageError(fmt::format("{}: unknown store_type {}; ddprun supports store_type=tcp",
                               printable(given.origin), quote(value)));
}

// One key=value into `conf`.
void applyRdzvConfValue(const GivenValue& given, const ConfKey& known, std::string_view value,
                        RdzvConf& conf) {
  const std::string_view key = known.name;
  RendezvousSettings& settings = conf.settings;
  switch (known.kind) {
    case ConfKind::kSeconds:
      settings.*known.seconds = secondsValue(given, key, value);
      conf.joinTimeoutGiven = conf.joinTimeoutGiven || key == "join_timeout";
      return;
    case ConfKind::kOptionalSeconds:
      (key == "timeout" ? conf.staticTimeout : settings.heartbeatTimeout) =
          secondsValue(given, key, value);
      return;
    case ConfKind::kCount:
      settings.keepAliveMaxAttempts = countValue(given, key, value);
      return;
    case ConfKind::kBoolean:
      settings.isHost = booleanValue(given, key, value);
      return;
    case ConfKind::kStoreType:
      checkStoreType(given, value);
      return;
    case ConfKind::kIgnored:
      return;
    case ConfKind::kFile:
      // Read (and a secret's mode checked) by the agent when it starts: one place reads them.
      settings.*known.file = std::string(value);
      return;
  }
}

// The token and TLS files make sense only together. One function, so that the shared check from
// rendezvous/ can replace it as a whole; its messages are what users see today.
void checkTokenAndTls(const RendezvousSettings& s, const GivenValue& given) {
  if (s.tlsCert.empty() && s.tlsKey.empty() && s.tlsCa.empty()) return;
  // TLS hides the bytes; the token is what keeps strangers out, and the relay needs it.
  if (s.tokenFile.empty()) {
    throw UsageError(fmt::format("{}: TLS needs the job's token too; add token_file=PATH",
                                 printable(given.origin)));
  }
  // Any agent may host the workers' store (group rank 0 of a round), so each needs both.
  if (s.tlsCert.empty() || s.tlsKey.empty()) {
    throw UsageError(fmt::format("{}: give every agent both tls_cert=PATH and tls_key=PATH (any "
                                 "agent may host the workers' store)",
                                 printable(given.origin)));
  }
}

}  // namespace

RdzvConf parseRdzvConf(const GivenValue& given, std::vector<std::string>& warnings) {
  RdzvConf conf;
  if (trim(given.value).empty()) return conf;
  for (const auto item : split(given.value, ',')) {
    if (trim(item).empty()) continue;
    const auto equals = item.find('=');
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : trim(item.substr(equals + 1));
    if (key.empty()) {
      throw UsageError(fmt::format("{}: entry {} has no key; write key=value,key=value, e.g. {}",
                                   printable(given.origin), quote(item),
                                   example(given, "join_timeout=600")));
    }
    if (value.empty()) {
      throw UsageError(fmt::format("{}: key {} has no value; write {}=VALUE",
                                   printable(given.origin), quote(key), printable(key)));
    }
    const ConfKey* known = findConfKey(key);
    if (known == nullptr) {
      warnings.push_back(fmt::format("{}: unknown key {} ignored (ddprun knows {})",
                                     printable(given.origin), quote(key), knownKeyNames()));
      continue;
    }
    applyRdzvConfValue(given, *known, value, conf);
  }
  checkTokenAndTls(conf.settings, given);
  return conf;
}

}  // namespace ddprun::launcher::cli_detail
