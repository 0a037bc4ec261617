#include "stores/etcd_store_backend.h"

#include <fmt/format.h>

#include "core/shown_text.h"
#include "ddprun/common/shown_key.h"
#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/etcd_store.h"

namespace ddprun::launcher {

namespace etcd = rendezvous::etcd;

std::string etcdKeyPrefix(const std::string& etcdPrefix) {
  std::string prefix = etcdPrefix;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return prefix + "/";
}

etcd::EtcdClientOptions etcdClientOptions(const RendezvousConfig& config) {
  etcd::EtcdClientOptions options;
  options.endpoints = config.etcdEndpoints;
  options.timeout = config.settings.readTimeout;
  options.tls.caCertificate = config.settings.etcdCaCert;
  options.tls.certificate = config.settings.etcdCert;
  options.tls.privateKey = config.settings.etcdKey;
  if (!config.settings.etcdUser.empty()) {
    try {
      options.credentials =
          etcd::readEtcdCredentials(config.settings.etcdUser, config.settings.etcdPasswordFile);
    } catch (const etcd::EtcdError& error) {
      throw StoreBackendError(fmt::format("--rdzv-conf password_file: {}", error.what()));
    }
  }
  return options;
}

namespace {

std::shared_ptr<etcd::EtcdClient> makeClient(etcd::EtcdClientOptions options) {
  try {
    return std::make_shared<etcd::EtcdClient>(std::move(options));
  } catch (const etcd::EtcdError& error) {
    // kRejected: a certificate or key file that cannot be used (the client names it).
    throw StoreBackendError(
        fmt::format("--rdzv-conf: {}; give etcd's certificate files as "
                    "cacert=, cert= and key= (PEM, the key mode 600)",
                    error.what()));
  }
}

}  // namespace

EtcdStoreBackend::EtcdStoreBackend(etcd::EtcdClientOptions options, std::string keyPrefix,
                                   std::string probeKey, bool jobHasToken)
    : options_(std::move(options)),
      keyPrefix_(std::move(keyPrefix)),
      probeKey_(std::move(probeKey)),
      jobHasToken_(jobHasToken) {
  // Made now, so that a certificate file that cannot be used is said before anything starts.
  clients_.emplace(options_.timeout, makeClient(options_));
}

std::shared_ptr<etcd::EtcdClient> EtcdStoreBackend::clientFor(
    std::chrono::milliseconds callTimeout) {
  std::lock_guard lock(mutex_);
  auto& client = clients_[callTimeout];
  if (!client) {
    etcd::EtcdClientOptions options = options_;
    options.timeout = callTimeout;
    client = makeClient(std::move(options));
  }
  return client;
}

std::unique_ptr<rendezvous::HoldingStore> EtcdStoreBackend::connect(
    std::chrono::milliseconds callTimeout, std::chrono::milliseconds connectTimeout) {
  // EtcdStore does no I/O when made, so whether etcd answers is asked here, once per connection
  // (Membership makes four, at start): an agent must not join with an etcd it cannot use.
  const std::shared_ptr<etcd::EtcdClient> client = clientFor(callTimeout);
  try {
    client->get(keyPrefix_ + probeKey_, etcd::Clock::now() + connectTimeout);
  } catch (const etcd::EtcdError& error) {
    switch (error.code()) {
      case etcd::EtcdError::Code::kUnreachable:
      case etcd::EtcdError::Code::kUnavailable:
      case etcd::EtcdError::Code::kTimeout:
        // Not up yet, no leader yet, or too slow: worth asking again until read_timeout.
        throw rendezvous::StoreConnectionError(error.what());
      case etcd::EtcdError::Code::kBadResponse:
      case etcd::EtcdError::Code::kUnsupported:
        throw rendezvous::StoreHandshakeError(
            fmt::format("{}; ddprun needs etcd 3.4 or later, at its members' client URLs (port "
                        "2379 by default)",
                        error.what()),
            rendezvous::StoreHandshakeError::Peer::kHttpServer);
      case etcd::EtcdError::Code::kAuth:
        // With a user: its password is wrong, or its roles do not reach the job's keys.
        if (options_.credentials) {
          throw rendezvous::StoreAuthError(
              fmt::format("etcd refused user '{}': {}; check username= and password_file= in "
                          "--rdzv-conf, and that the user's role may read and write {}",
                          shown(options_.credentials->user), error.what(),
                          common::shownKey(keyPrefix_ + probeKey_)),
              rendezvous::StoreAuthError::Code::kUserRefused);
        }
        [[fallthrough]];
      case etcd::EtcdError::Code::kRejected:
        // Without a user: etcd's auth is on (etcd 3.4 answers a read with no user "user name is
        // empty", gRPC InvalidArgument), the same reading as refuseIfOpen's. The fix is a user,
        // not another endpoint.
        if (!options_.credentials) {
          throw rendezvous::StoreAuthError(
              fmt::format("etcd refuses to read {} without a user: {}; an etcd with auth enabled "
                          "needs --rdzv-conf username=NAME,password_file=PATH (docs/etcd.md)",
                          common::shownKey(keyPrefix_ + probeKey_), error.what()),
              rendezvous::StoreAuthError::Code::kUserRequired);
        }
        [[fallthrough]];
      case etcd::EtcdError::Code::kNotFound:
      case etcd::EtcdError::Code::kCompacted:
        // etcd answers and refuses this client: asking again will not help.
        throw rendezvous::StoreHandshakeError(
            fmt::format("etcd refuses to read {}: {}", common::shownKey(keyPrefix_ + probeKey_),
                        error.what()),
            rendezvous::StoreHandshakeError::Peer::kHttpServer);
    }
    throw;
  }
  if (jobHasToken_ && !shownClosed_) refuseIfOpen(connectTimeout);
  auto store = std::make_unique<rendezvous::EtcdStore>(client, keyPrefix_);
  store->setTimeout(callTimeout);
  return store;
}

void EtcdStoreBackend::refuseIfOpen(std::chrono::milliseconds connectTimeout) {
  etcd::EtcdClientOptions anonymous = options_;
  anonymous.credentials.reset();
  anonymous.timeout = connectTimeout;
  try {
    makeClient(std::move(anonymous))
        ->get(keyPrefix_ + probeKey_, etcd::Clock::now() + connectTimeout);
  } catch (const etcd::EtcdError& error) {
    switch (error.code()) {
      case etcd::EtcdError::Code::kAuth:
      case etcd::EtcdError::Code::kRejected:
        // No user, no read (etcd 3.4 says "user name is empty", gRPC 3): etcd's auth is on, and
        // its roles decide who writes the job's keys.
        shownClosed_ = true;
        return;
      case etcd::EtcdError::Code::kUnreachable:
      case etcd::EtcdError::Code::kUnavailable:
      case etcd::EtcdError::Code::kTimeout:
        throw rendezvous::StoreConnectionError(error.what());
      default:
        throw rendezvous::StoreHandshakeError(
            fmt::format("etcd answered a read with no user neither with the key nor with an auth "
                        "refusal: {}",
                        error.what()),
            rendezvous::StoreHandshakeError::Peer::kHttpServer);
    }
  }
  throw rendezvous::StoreAuthError(
      fmt::format(
          "this job has a token (--rdzv-conf token_file), but etcd at {} serves clients "
          "with no user, so anyone who reaches it could rewrite the job's rounds (end it "
          "as a success, say) without the token; turn etcd's auth on and give the job's "
          "etcd user as username= and password_file= (docs/etcd.md, \"Auth and TLS\"), or drop "
          "token_file to run unprotected",
          address()),
      rendezvous::StoreAuthError::Code::kNoToken);
}

std::string EtcdStoreBackend::address() const {
  std::string members;
  for (const auto& endpoint : options_.endpoints) {
    members += (members.empty() ? "" : ",") + endpoint.text();
  }
  return members;
}

std::string EtcdStoreBackend::unreachableFix() const {
  return "check that etcd runs there and that --rdzv-endpoint lists its members' client URLs "
         "(host:port, 2379 by default)";
}

}  // namespace ddprun::launcher
