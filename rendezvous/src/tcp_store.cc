#include "ddprun/rendezvous/tcp_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <random>
#include <thread>

#include "auth/handshake.h"
#include "client/client_socket.h"
#include "client/store_handshake.h"
#include "ddprun/common/shown_key.h"
#include "protocol/wire.h"

namespace ddprun::rendezvous {
namespace {

using detail::ClientSocket;
using detail::Finding;
using detail::Opening;
using detail::pingEcho;
using detail::probe;
using detail::ProbeResult;
using detail::recognise;
using detail::sendValidateAndPing;
using detail::shownBytes;
using detail::sighting;
using detail::Sighting;
using detail::SocketError;
using detail::SocketTimeout;
using detail::SocketValueTooLarge;
using detail::TlsHandshakeError;
using protocol::Op;
using Clock = std::chrono::steady_clock;

// Longest we wait for CANCEL_WAIT's answer or a handshake reply from a server that is up.
constexpr auto kControlReplyTimeout = std::chrono::seconds(30);
// Longest each question to a peer that failed the handshake waits for its answer: a store answers
// at once (a round trip), and what waits for a line end answers one at once too.
constexpr auto kProbePatience = std::chrono::seconds(1);

void putOp(std::string& out, WireDialect dialect, Op op) {
  protocol::putU8(out, *protocol::wireCode(dialect, op));
}

void putKey(std::string& out, std::string_view prefix, std::string_view key) {
  protocol::putU64(out, prefix.size() + key.size());
  out.append(prefix).append(key);
}

void putKeys(std::string& out, std::string_view prefix, const std::vector<std::string>& keys) {
  protocol::putU64(out, keys.size());
  for (const std::string& key : keys) putKey(out, prefix, key);
}

// Exponential backoff with +/- jitter, so that a thousand clients of a restarting server do not
// knock in lockstep.
class Backoff {
 public:
  explicit Backoff(const TcpStoreOptions& options)
      : next_(options.initialBackoff),
        max_(options.maxBackoff),
        factor_(options.backoffFactor),
        jitter_(std::clamp(options.backoffJitter, 0.0, 1.0)),
        random_(std::random_device{}()) {}

  std::chrono::milliseconds nextDelay() {
    std::uniform_real_distribution<double> spread(1.0 - jitter_, 1.0 + jitter_);
    const auto delay = std::chrono::milliseconds(
        static_cast<std::int64_t>(static_cast<double>(next_.count()) * spread(random_)));
    next_ = std::min(max_, std::chrono::milliseconds(static_cast<std::int64_t>(
                               static_cast<double>(next_.count()) * factor_ + 1)));
    return delay;
  }

 private:
  std::chrono::milliseconds next_;
  std::chrono::milliseconds max_;
  double factor_;
  double jitter_;
  std::mt19937 random_;
};

// " 'k'", the key as error messages show it (escaped: a key may be a name listKeys() returned,
// which whoever can write the store chose).
std::string quoted(std::string_view key) { return " " + common::shownKey(key); }

// A call about no key in particular (numKeys, listKeys).
struct NoKey {};
std::string quoted(NoKey) { return {}; }

// " 'a', 'b'": the first few keys of a call, then how many there were.
std::string quoted(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += fmt::format("{} {}", i == 0 ? "" : ",", common::shownKey(keys[i]));
  }
  if (keys.size() > kShown) out += fmt::format(", ... ({} keys)", keys.size());
  return out;
}

std::int64_t millisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// "something answers there but is not a ddprun/TCPStore store: WHAT (EVIDENCE)", thrown as
// StoreHandshakeError with `peer`. `prefix` is "store HOST:PORT: CONTEXT".
[[noreturn]] void throwNotAStore(StoreHandshakeError::Peer peer, std::string_view evidence,
                                 std::string_view prefix) {
  using Peer = StoreHandshakeError::Peer;
  std::string_view looks;
  switch (peer) {
    case Peer::kHttpServer:
      looks = "it looks like an HTTP server";
      break;
    case Peer::kSshServer:
      looks = "it looks like an SSH server";
      break;
    case Peer::kTlsServer:
      looks = "it speaks TLS, but no ddprun store answers inside it";
      break;
    case Peer::kOtherBytes:
      looks = "it answers with bytes no store sends";
      break;
    case Peer::kSilent:
    case Peer::kClosesAtOnce:
    case Peer::kStore:
      break;  // the evidence says it all
  }
  const std::string said = looks.empty()      ? std::string(evidence)
                           : evidence.empty() ? std::string(looks)
                                              : fmt::format("{} ({})", looks, evidence);
  throw StoreHandshakeError(
      fmt::format("{}something answers there but is not a ddprun/TCPStore store: {}", prefix, said),
      peer);
}

// After a failed handshake: throws StoreHandshakeError when the peer's bytes (or its silence, a
// line end asked) show it is no store; counts a close without a byte in `closedAtOnce`; returns
// otherwise (a store in trouble: worth another try). `prefix` is "store HOST:PORT: CONTEXT".
void handshakeFailed(ClientSocket& socket, const SocketError& error, std::size_t answered,
                     std::string_view expected, std::string_view prefix, int& closedAtOnce) {
  switch (sighting(socket, error, answered, expected)) {
    case Sighting::kForeign:
      // The rest of what it sent is likely here already (OpenSSL stops at a record header).
      socket.receivePlain(Clock::now());
      throwNotAStore(
          recognise(socket.received().substr(answered)),
          fmt::format("it answered '{}'", shownBytes(socket.received().substr(answered))), prefix);
    case Sighting::kSilent: {
      // A store answers every opening at once, or closes. What waits for a line end before it
      // answers (HTTP and most text protocols) is asked with one; a store would read it as a
      // PING after ours (0x0d) or as a wrong proof, and answer or close.
      const auto started = Clock::now();
      socket.sendPlain("\r\n\r\n");
      socket.receivePlain(started + kProbePatience);
      if (socket.received().size() > answered) {
        const std::string_view sent = std::string_view(socket.received()).substr(answered);
        // A store that was only slow: its reply came after all. Another try.
        if (!expected.empty() &&
            sent.starts_with(expected.substr(0, std::min(sent.size(), expected.size())))) {
          return;
        }
        throwNotAStore(recognise(sent),
                       fmt::format("it answered '{}' to a line end", shownBytes(sent)), prefix);
      }
      throwNotAStore(StoreHandshakeError::Peer::kSilent,
                     fmt::format("it accepts connections but answers nothing to the store's "
                                 "handshake or to a line end ({}); a torch 1.13 TCPStore server "
                                 "needs the torch-1.13 dialect",
                                 error.what()),
                     prefix);
    }
    case Sighting::kClosed:
      ++closedAtOnce;
      return;
    case Sighting::kBroken:
      return;
  }
}

// After `attempts` handshakes the peer closed without a byte: the error that names what the
// probes found (store_handshake.h), for a client with a token (`token`) and TLS files (`tls`) or
// not.
[[noreturn]] void throwWhatAnswers(const ProbeResult& found, bool token, bool tls,
                                   std::string_view prefix, int attempts) {
  using Code = StoreAuthError::Code;
  // This client has TLS and the store completed no TLS handshake, yet answered plain openings.
  const auto withoutTls = [&](std::string_view alsoWithout, Code code) {
    throw StoreAuthError(
        fmt::format("{}the store did not complete a TLS handshake ({} attempts): it runs without "
                    "TLS{}; give the store the job's TLS files (ddprun-rendezvous "
                    "--tls-cert/--tls-key, or the hosting agent's --rdzv-conf tls_cert=,tls_key=), "
                    "or give no agent any",
                    prefix, attempts, alsoWithout),
        code);
  };
  switch (found.finding) {
    case Finding::kTokenStore:
      if (token) withoutTls("", Code::kNoTls);  // this client's opening was TLS, then
      throw StoreAuthError(
          fmt::format("{}the store requires the job's token and this client has none; give it "
                      "the store's token file (--rdzv-conf token_file=PATH)",
                      prefix),
          Code::kTokenRequired);
    case Finding::kOpenStore:
      if (tls) withoutTls(" and without a token", token ? Code::kNoToken : Code::kNoTls);
      throw StoreAuthError(
          fmt::format("{}the store runs without a token ({} attempts closed at the token "
                      "handshake, and it answers a client without one); give it the same token "
                      "(ddprun-rendezvous --token-file, or the hosting agent's --rdzv-conf "
                      "token_file=), or give no agent any",
                      prefix, attempts),
          Code::kNoToken);
    case Finding::kTlsStore:
      throw StoreAuthError(
          fmt::format("{}the store serves TLS and this client has no TLS files; give every agent "
                      "the job's {}TLS files (--rdzv-conf {}tls_cert=PATH,tls_key=PATH)",
                      prefix, token ? "" : "token and ", token ? "" : "token_file=PATH,"),
          Code::kTlsRequired);
    case Finding::kTlsOther:
      throwNotAStore(StoreHandshakeError::Peer::kTlsServer, "", prefix);
    case Finding::kForeign:
      throwNotAStore(recognise(found.bytes),
                     fmt::format("it answered '{}'", shownBytes(found.bytes)), prefix);
    case Finding::kNothing:
      break;
  }
  throwNotAStore(
      StoreHandshakeError::Peer::kClosesAtOnce,
      fmt::format("it accepts connections and closes them without a byte, whatever is "
                  "sent ({} attempts, and the openings of stores with other settings); "
                  "a ddprun store does so only at its connection limit (its log says so), "
                  "and a torch 1.13 TCPStore server needs the torch-1.13 dialect",
                  attempts),
      prefix);
}

// Two values nobody stores, for reading a key with compareSet (see readLocked()).
constexpr std::string_view kProbes[] = {"<ddprun get probe 1>", "<ddprun get probe 2>"};

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  Store::setTimeout(options_.timeout);
  std::lock_guard lock(mutex_);
  connect({});
}

TcpStore::~TcpStore() = default;

std::string TcpStore::where() const {
  const bool ipv6 = options_.host.find(':') != std::string::npos;
  return ipv6 ? fmt::format("store [{}]:{}", options_.host, options_.port)
              : fmt::format("store {}:{}", options_.host, options_.port);
}

void TcpStore::proveToken(ClientSocket& socket, Clock::time_point deadline) {
  const auth::ClientHandshake handshake(*options_.secret);
  socket.sendAll(handshake.hello());
  // The magic first: a peer that is no store (an SSH banner, say) is told by its first bytes at
  // once, not after waiting for a whole challenge it will never send.
  std::string challenge(auth::kServerChallengeBytes, '\0');
  socket.readExact(challenge.data(), auth::kMagic.size(), deadline);
  if (std::string_view(challenge).substr(0, auth::kMagic.size()) != auth::kMagic) {
    throw SocketError("the reply to the token hello is not a token challenge");
  }
  socket.readExact(challenge.data() + auth::kMagic.size(), challenge.size() - auth::kMagic.size(),
                   deadline);
  std::string proof;
  switch (handshake.answer(challenge, proof)) {
    case auth::ClientHandshake::Verdict::kAccepted:
      socket.sendAll(proof);
      return;
    case auth::ClientHandshake::Verdict::kNotAChallenge:
      throw SocketError("the reply to the token hello is not a token challenge");
    case auth::ClientHandshake::Verdict::kWrongSecret:
      throw StoreAuthError(
          fmt::format("{}: the rendezvous refused this token: the store holds a different one "
                      "(give every agent and ddprun-rendezvous the same token file)",
                      where()),
          StoreAuthError::Code::kWrongToken);
  }
}

void TcpStore::connect(std::string_view context) {
  socket_.reset();
  const auto started = Clock::now();
  const auto deadline = started + options_.connectTimeout;
  Backoff backoff(options_);
  std::string lastError;
  int lastSystemError = 0;
  bool lastUnresolved = false;  // the last attempt failed to resolve the host name
  int closedAtOnce = 0;         // handshakes the peer closed without a byte
  int attempts = 0;
  const Opening opening = options_.tls      ? Opening::kTls
                          : options_.secret ? Opening::kTokenHello
                                            : Opening::kValidate;
  const std::string prefix = fmt::format("{}: {}", where(), context);
  for (;;) {
    ++attempts;
    std::unique_ptr<ClientSocket> socket;
    try {
      socket = ClientSocket::connect(options_.host, options_.port, deadline);
      lastUnresolved = false;
    } catch (const SocketError& error) {
      lastError = error.what();
      lastSystemError = error.systemError();
      lastUnresolved = dynamic_cast<const detail::ResolveError*>(&error) != nullptr;
    }
    if (socket) {
      // What a store would have answered so far (`answered` bytes of socket->received()) and how
      // its next reply begins: what the peer's bytes are checked against if the handshake fails.
      std::size_t answered = 0;
      std::string expected;
      bool inTls = false;
      try {
        if (options_.tls) {
          socket->startTls(options_.tls->clientContext(),
                           std::min(deadline, Clock::now() + kControlReplyTimeout));
          inTls = true;
        }
        socket->setSendTimeout(options_.timeout);
        if (options_.secret) {
          expected = auth::kMagic;
          proveToken(*socket, std::min(deadline, Clock::now() + kControlReplyTimeout));
          answered = auth::kServerChallengeBytes;
        }
        if (options_.dialect == WireDialect::kTorch2) {
          const auto nonce = static_cast<std::uint32_t>(std::random_device{}());
          expected = pingEcho(nonce);
          sendValidateAndPing(*socket, nonce);
          const std::uint32_t echoed =
              socket->readU32(std::min(deadline, Clock::now() + kControlReplyTimeout));
          if (echoed != nonce) {
            throw SocketError(
                fmt::format("PING returned 0x{:08x} instead of 0x{:08x}", echoed, nonce));
          }
        }
        socket_ = std::move(socket);
        return;
      } catch (const TlsHandshakeError& error) {
        if (error.kind() == TlsHandshakeError::Kind::kUntrusted) {
          throw StoreAuthError(fmt::format("{}: {}{}", where(), context, error.what()),
                               StoreAuthError::Code::kUntrustedCertificate);
        }
        lastError = error.what();
        handshakeFailed(*socket, error, 0, "", prefix, closedAtOnce);
      } catch (const SocketError& error) {
        lastError = error.what();
        lastSystemError = error.systemError();
        // Inside TLS the bytes kept are ciphertext: only a peer with the job's certificate gets
        // there, a store of the job whose failure is worth another try.
        if (!inTls) handshakeFailed(*socket, error, answered, expected, prefix, closedAtOnce);
      }
      // A few closed handshakes cover a store shedding load (at its connection limit it accepts
      // and closes); beyond that, ask what it is instead of retrying for the whole timeout.
      if (closedAtOnce >= 3) break;
    }
    const auto delay = backoff.nextDelay();
    if (Clock::now() + delay >= deadline) break;
    std::this_thread::sleep_for(delay);
  }
  if (closedAtOnce > 0) {
    throwWhatAnswers(probe(options_.host, options_.port, opening, kProbePatience),
                     options_.secret.has_value(), options_.tls != nullptr, prefix, attempts);
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  const std::string hint =
      lastSystemError == ECONNREFUSED
          ? "; is ddprun-rendezvous (or the job's rank-0 ddprun agent) running there?"
          : "";
  const std::string message =
      fmt::format("{}: {}cannot connect after {} ms and {} attempts: {}{}", where(), context,
                  waited.count(), attempts, lastError, hint);
  if (lastUnresolved) throw StoreUnresolvedError(message);
  throw StoreConnectionError(message);
}

// The keys are formatted only for a message (connecting, failing), not on every call.
template <typename Keys, typename Body>
auto TcpStore::call(std::string_view what, const Keys& keys, Body&& body) {
  std::lock_guard lock(mutex_);
  const auto started = Clock::now();
  if (!socket_) connect(fmt::format("{}{}: ", what, quoted(keys)));
  try {
    request_.clear();
    return body(*socket_);
  } catch (const SocketValueTooLarge& error) {
    socket_.reset();  // the value's bytes are still on their way: no further reply can be read
    throw StoreValueTooLargeError(
        fmt::format("{}: {}{}: {}", where(), what, quoted(keys), error.what()), error.bytes(),
        error.limit());
  } catch (const SocketError& error) {
    socket_.reset();
    throw StoreConnectionError(fmt::format("{}: {}{} failed after {} ms: {}", where(), what,
                                           quoted(keys), millisecondsSince(started), error.what()));
  }
}

void TcpStore::throwUnsupported(std::string_view what) const {
  throw StoreUnsupportedError(fmt::format("{}: {} is not part of the {} protocol", where(), what,
                                          dialectName(options_.dialect)));
}

void TcpStore::set(std::string_view key, std::string_view value) {
  call("set", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kSet);
    putKey(request_, options_.keyPrefix, key);
    protocol::putBlob(request_, value);
    socket.sendAll(request_);
  });
}

void TcpStore::finishWait(const std::vector<std::string>& keys, Clock::time_point deadline,
                          Duration timeout) {
  ClientSocket& socket = *socket_;
  request_.clear();
  putOp(request_, options_.dialect, Op::kWait);
  putKeys(request_, options_.keyPrefix, keys);
  socket.sendAll(request_);
  try {
    socket.readU8(deadline);
    return;
  } catch (const SocketTimeout&) {
  }
  if (options_.dialect == WireDialect::kTorch2) {
    // The server may have sent STOP_WAITING just before it saw the cancel: then `00 01` arrives.
    request_.clear();
    putOp(request_, options_.dialect, Op::kCancelWait);
    socket.sendAll(request_);
    const auto cancelDeadline =
        Clock::now() + std::min<std::chrono::milliseconds>(options_.timeout, kControlReplyTimeout);
    if (socket.readU8(cancelDeadline) == protocol::kStopWaiting) socket.readU8(cancelDeadline);
  } else {
    // 1.13 cannot cancel: a late STOP_WAITING would be taken as the next reply. Start afresh.
    socket_.reset();
  }
  throw StoreTimeoutError(fmt::format("{}: wait timed out after {} ms, keys:{}", where(),
                                      timeout.count(), quoted(keys)));
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  call("wait", keys, [&](ClientSocket&) { finishWait(keys, Clock::now() + timeout, timeout); });
}

std::string TcpStore::get(std::string_view key) {
  return call("get", key, [&](ClientSocket& socket) {
    return getLocked(socket, key, Clock::now() + timeout());
  });
}

std::optional<std::string> TcpStore::tryGet(std::string_view key) {
  // One compareSet probe: one round trip for a key that is there (readLocked), atomic, where
  // CHECK then get() (CHECK, WAIT, GET) was three and blocked on a key deleted in between.
  return call("tryGet", key, [&](ClientSocket& socket) { return readLocked(socket, key); });
}

std::string TcpStore::getLocked(ClientSocket& socket, std::string_view key,
                                Clock::time_point deadline) {
  const std::vector<std::string> keys = {std::string(key)};
  for (;;) {
    finishWait(keys, deadline, timeout());
    if (options_.dialect == WireDialect::kTorch2) {
      request_.clear();
      putOp(request_, options_.dialect, Op::kGet);
      putKey(request_, options_.keyPrefix, key);
      socket.sendAll(request_);
      std::string value =
          socket.readBlob(options_.maxReplyValueBytes, Clock::now() + options_.timeout);
      if (!value.empty()) return value;
    }
    // The key was there at the WAIT but may have been deleted since: a 2.x GET then answers ""
    // like a stored "", and a 1.13 GET costs the connection. Read it in a way that tells, and
    // wait again if it is gone.
    if (std::optional<std::string> value = readLocked(socket, key)) return *std::move(value);
  }
}

std::optional<std::string> TcpStore::readLocked(ClientSocket& socket, std::string_view key) {
  // A compareSet whose expected value nobody stores changes nothing (were it stored, the swap
  // would rewrite it unchanged) and answers, atomically, the value, or that expected value when
  // the key is missing. A second probe with another value tells a key holding the first apart.
  for (std::string_view probe : kProbes) {
    std::string value = compareSetLocked(socket, key, probe, probe);
    if (value != probe) return value;
  }
  return std::nullopt;
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  return call("add", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kAdd);
    putKey(request_, options_.keyPrefix, key);
    protocol::putI64(request_, delta);
    socket.sendAll(request_);
    try {
      return socket.readI64(Clock::now() + options_.timeout);
    } catch (const SocketTimeout&) {
      throw;
    } catch (const SocketError& error) {
      throw SocketError(std::string(error.what()) +
                        " (a server closes the connection when the value is not an integer)");
    }
  });
}

std::string TcpStore::compareSet(std::string_view key, std::string_view expected,
                                 std::string_view desired) {
  return call("compareSet", key, [&](ClientSocket& socket) {
    return compareSetLocked(socket, key, expected, desired);
  });
}

std::string TcpStore::compareSetLocked(ClientSocket& socket, std::string_view key,
                                       std::string_view expected, std::string_view desired) {
  request_.clear();
  putOp(request_, options_.dialect, Op::kCompareSet);
  putKey(request_, options_.keyPrefix, key);
  protocol::putBlob(request_, expected);
  protocol::putBlob(request_, desired);
  socket.sendAll(request_);
  return socket.readBlob(options_.maxReplyValueBytes, Clock::now() + options_.timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return call("check", keys, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kCheck);
    putKeys(request_, options_.keyPrefix, keys);
    socket.sendAll(request_);
    return socket.readU8(Clock::now() + options_.timeout) == protocol::kCheckReady;
  });
}

bool TcpStore::deleteKey(std::string_view key) {
  return call("deleteKey", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kDeleteKey);
    putKey(request_, options_.keyPrefix, key);
    socket.sendAll(request_);
    return socket.readI64(Clock::now() + options_.timeout) != 0;
  });
}

std::int64_t TcpStore::numKeys() {
  return call("numKeys", NoKey{}, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kNumKeys);
    socket.sendAll(request_);
    return socket.readI64(Clock::now() + options_.timeout);
  });
}

std::vector<std::string> TcpStore::multiGet(const std::vector<std::string>& keys) {
  if (options_.dialect == WireDialect::kTorch113) return Store::multiGet(keys);
  return call("multiGet", keys, [&](ClientSocket& socket) {
    finishWait(keys, Clock::now() + timeout(), timeout());
    request_.clear();
    putOp(request_, options_.dialect, Op::kMultiGet);
    putKeys(request_, options_.keyPrefix, keys);
    socket.sendAll(request_);
    std::vector<std::string> values;
    values.reserve(keys.size());
    const auto deadline = Clock::now() + options_.timeout;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      values.push_back(socket.readBlob(options_.maxReplyValueBytes, deadline));
    }
    // "" also stands for a key deleted since the WAIT: read it again in a way that tells, and get
    // one that is gone as get() would (Store::multiGet's way, a timeout per key).
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!values[i].empty()) continue;
      std::optional<std::string> value = readLocked(socket, keys[i]);
      values[i] = value ? *std::move(value) : getLocked(socket, keys[i], Clock::now() + timeout());
    }
    return values;
  });
}

void TcpStore::multiSet(const std::vector<std::string>& keys,
                        const std::vector<std::string>& values) {
  if (options_.dialect == WireDialect::kTorch113 || keys.size() != values.size()) {
    Store::multiSet(keys, values);  // also reports the size mismatch
    return;
  }
  call("multiSet", keys, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kMultiSet);
    protocol::putU64(request_, keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      putKey(request_, options_.keyPrefix, keys[i]);
      protocol::putBlob(request_, values[i]);
    }
    socket.sendAll(request_);
  });
}

void TcpStore::append(std::string_view key, std::string_view value) {
  if (options_.dialect == WireDialect::kTorch113) {
    Store::append(key, value);
    return;
  }
  call("append", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kAppend);
    putKey(request_, options_.keyPrefix, key);
    protocol::putBlob(request_, value);
    socket.sendAll(request_);
  });
}

std::vector<std::string> TcpStore::listKeys() {
  if (options_.dialect == WireDialect::kTorch113) throwUnsupported("listKeys");
  return call("listKeys", NoKey{}, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kListKeys);
    socket.sendAll(request_);
    const auto deadline = Clock::now() + options_.timeout;
    const std::int64_t count = socket.readI64(deadline);
    std::vector<std::string> keys;
    for (std::int64_t i = 0; i < count; ++i) {
      std::string key = socket.readBlob(options_.maxReplyValueBytes, deadline);
      // Like torch's client: keys of other namespaces (e.g. "init/") are not shown.
      if (key.starts_with(options_.keyPrefix))
        keys.push_back(key.substr(options_.keyPrefix.size()));
    }
    return keys;
  });
}

ListedKeys TcpStore::listPrefix(std::string_view prefix, std::size_t maxKeys) {
  if (options_.dialect == WireDialect::kTorch113) throwUnsupported("listPrefix");
  return call("listPrefix", prefix, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kListPrefix);
    putKey(request_, options_.keyPrefix, prefix);
    protocol::putI64(request_, static_cast<std::int64_t>(std::min(maxKeys, kMaxListedKeys)));
    socket.sendAll(request_);
    const auto deadline = Clock::now() + options_.timeout;
    const std::int64_t count = socket.readI64(deadline);
    // The server never sends more; a peer that says it would is not one to read further from.
    if (count < 0 || static_cast<std::uint64_t>(count) > kMaxListedKeys) {
      throw SocketError(fmt::format("LIST_PREFIX reply announces {} names, over the limit of {}",
                                    count, kMaxListedKeys));
    }
    ListedKeys listed;
    listed.keys.reserve(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      std::string key = socket.readBlob(kMaxListedBytes, deadline);
      key.erase(0, std::min(key.size(), options_.keyPrefix.size()));  // every name carries it
      listed.keys.push_back(std::move(key));
    }
    listed.more = socket.readU8(deadline) != 0;
    return listed;
  });
}

std::int64_t TcpStore::deletePrefix(std::string_view prefix) {
  if (options_.dialect == WireDialect::kTorch113) throwUnsupported("deletePrefix");
  // A request per batch of Store::kMaxListedKeys keys; bounded as Store::deletePrefix's pages.
  constexpr int kMaxBatches = 4096;
  std::int64_t deleted = 0;
  for (int batch = 0; batch < kMaxBatches; ++batch) {
    const auto [count, more] = call("deletePrefix", prefix, [&](ClientSocket& socket) {
      putOp(request_, options_.dialect, Op::kDeletePrefix);
      putKey(request_, options_.keyPrefix, prefix);
      socket.sendAll(request_);
      const auto deadline = Clock::now() + options_.timeout;
      const std::int64_t n = socket.readI64(deadline);
      return std::pair<std::int64_t, bool>(n, socket.readU8(deadline) != 0);
    });
    deleted += count;
    if (!more || count <= 0) break;
  }
  return deleted;
}

std::string TcpStore::hold(std::string_view key, std::string_view value,
                           std::chrono::milliseconds ttl, std::string_view notifyKey,
                           std::string_view notifyValue) {
  if (options_.dialect == WireDialect::kTorch113) throwUnsupported("hold");
  return call("hold", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kHold);
    putKey(request_, options_.keyPrefix, key);
    protocol::putBlob(request_, value);
    protocol::putU32(request_, static_cast<std::uint32_t>(std::clamp<std::int64_t>(
                                   ttl.count(), 0, std::numeric_limits<std::uint32_t>::max())));
    if (notifyKey.empty()) {
      protocol::putBlob(request_, {});  // no notification: the key, not the prefix alone
    } else {
      putKey(request_, options_.keyPrefix, notifyKey);
    }
    protocol::putBlob(request_, notifyValue);
    socket.sendAll(request_);
    return socket.readBlob(options_.maxReplyValueBytes, Clock::now() + options_.timeout);
  });
}

bool TcpStore::release(std::string_view key) {
  if (options_.dialect == WireDialect::kTorch113) throwUnsupported("release");
  return call("release", key, [&](ClientSocket& socket) {
    putOp(request_, options_.dialect, Op::kRelease);
    putKey(request_, options_.keyPrefix, key);
    socket.sendAll(request_);
    return socket.readI64(Clock::now() + options_.timeout) != 0;
  });
}

}  // namespace ddprun::rendezvous
