// EtcdStore: c10d's store semantics over etcd v3 (etcd_store.h; docs/etcd.md, "The store on
// etcd"). Every state change is a transaction whose guard makes a repeated attempt fail instead
// of applying twice; blocking calls read at a revision and watch from the next one.
#include "ddprun/rendezvous/etcd_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "ddprun/common/random_id.h"
#include "ddprun/common/shown_key.h"
#include "ddprun/common/text.h"
#include "kv_state.h"  // parseCounter: the one reading of a stored counter

namespace ddprun::rendezvous {
namespace {

using Clock = etcd::Clock;
using etcd::Compare;
using etcd::DeleteRequest;
using etcd::DeleteResult;
using etcd::EtcdError;
using etcd::KeyRange;
using etcd::KeyValue;
using etcd::PutRequest;
using etcd::PutResult;
using etcd::RangeRequest;
using etcd::RangeResult;
using etcd::Revision;
using etcd::Txn;
using etcd::TxnResult;

// etcd refuses a transaction of more operations than --max-txn-ops (128 by default).
constexpr std::size_t kMaxTxnOps = 128;
// ... and a request larger than --max-request-bytes (1.5 MiB by default): a multiSet's
// transactions stay below this many bytes of keys and values (one larger pair goes alone).
constexpr std::size_t kMaxTxnBytes = std::size_t{1} << 20;
// At most this many of one call's transactions in flight at once (readEach, multiSet). A closer's
// pass over a large round is tens of transactions, and sent one after another to an etcd busy
// with the agents' own requests, each waits its turn there; each one in flight holds a connection
// from the client's pool, so the number is a trade between the two (docs/benchmarks.md, "Scale").
constexpr std::size_t kTxnsInFlight = 8;
// A read-modify-write (add, append) retries when another writer changed the key between its read
// and its guarded write. Each lost race means another writer's transaction applied, so the
// caller waits only on others' progress; 1000 in a row is a writer storm beyond anything a job
// does to one key (every agent and worker of a large job writing the same counter at once is a
// few thousand writes, spread over the rounds each wins), and the call then fails, unapplied,
// rather than spinning for ever.
constexpr int kMaxRaceRetries = 1000;
// The destructor's revoke and deletions: a short bound, since a lease that is not revoked ends
// with its TTL anyway.
constexpr auto kCloseDeadline = std::chrono::milliseconds(1000);

// The store error an etcd failure is: the contract's kinds are decided on the code only.
[[noreturn]] void rethrow(const EtcdError& error, const std::string& what) {
  const std::string message = fmt::format("etcd store: {}: {}", what, error.what());
  switch (error.code()) {
    case EtcdError::Code::kUnreachable:
    case EtcdError::Code::kUnavailable:
    case EtcdError::Code::kTimeout:
      throw StoreConnectionError(message);
    case EtcdError::Code::kAuth:
      // The right kind of server refuses our credentials: the configuration must change.
      throw StoreHandshakeError(message, StoreHandshakeError::Peer::kStore);
    case EtcdError::Code::kBadResponse:
    case EtcdError::Code::kUnsupported:
      // What answers is no etcd this client can use (a peer port, a web server, an etcd older
      // than 3.3): waiting will not help, the endpoint must change.
      throw StoreHandshakeError(message, StoreHandshakeError::Peer::kHttpServer);
    default:
      throw StoreError(message);
  }
}

// Runs `f`, turning an EtcdError into the store's error naming `what`.
template <class F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const EtcdError& error) {
    rethrow(error, what);
  }
}

bool isOutage(EtcdError::Code code) {
  return code == EtcdError::Code::kUnreachable || code == EtcdError::Code::kUnavailable ||
         code == EtcdError::Code::kTimeout;
}

const RangeResult& rangeOf(const TxnResult& result, std::size_t index = 0) {
  if (index >= result.responses.size() ||
      !std::holds_alternative<RangeResult>(result.responses[index])) {
    throw StoreError("etcd store: a transaction's answer lacks the range it asked for");
  }
  return std::get<RangeResult>(result.responses[index]);
}

std::optional<KeyValue> onlyKv(const RangeResult& range) {
  if (range.kvs.empty()) return std::nullopt;
  return range.kvs.front();
}

// The narrowest range that covers `keys` (not empty): the key itself for one, otherwise from
// the smallest to just past the largest. A watch on it sees every key asked for, and the
// events of keys between them are filtered out by the caller.
KeyRange covering(const std::vector<std::string>& keys) {
  const auto [low, high] = std::minmax_element(keys.begin(), keys.end());
  if (*low == *high) return KeyRange::single(*low);
  return KeyRange{*low, *high + std::string(1, '\0')};
}

// Whether a guarded write (base -> written) that failed its guard after an uncertain attempt
// certainly did not apply, judged from the key as it is now. Our attempt, had it applied,
// would have been the first write after `base`: the key's next version (version 1 of a new key)
// holding `written`. If the key has exactly that version, in the same incarnation, and holds
// something else, that one write was another writer's, and ours can never apply later (its guard
// names a revision that is past). Anything else (our value there, or more writes since) cannot
// tell our write from another writer's that produced the same bytes, and is reported as an
// outcome unknown.
bool certainlyNotApplied(const std::optional<KeyValue>& base, const std::optional<KeyValue>& now,
                         const std::string& written) {
  if (!now) return false;
  if (base) {
    return now->createRevision == base->createRevision && now->version == base->version + 1 &&
           now->value != written;
  }
  return now->version == 1 && now->value != written;
}

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<etcd::EtcdClient> client, std::string keyPrefix)
    : client_(std::move(client)),
      keyPrefix_(std::move(keyPrefix)),
      keeper_(std::make_unique<detail::WatchKeeper>()) {
  if (!client_) throw std::invalid_argument("EtcdStore: no etcd client");
  if (keyPrefix_.empty() || keyPrefix_.back() != '/') {
    throw std::invalid_argument(fmt::format(
        "EtcdStore: the key prefix {} must be non-empty and end with '/' (an etcd is shared: a "
        "store never spans the whole keyspace or another prefix's keys)",
        common::shownKey(keyPrefix_)));
  }
}

EtcdStore::EtcdStore(EtcdStoreOptions options)
    : EtcdStore(std::make_shared<etcd::EtcdClient>(std::move(options.client)),
                std::move(options.keyPrefix)) {}

EtcdStore::~EtcdStore() {
  std::lock_guard lock(holdMutex_);
  const etcd::Deadline deadline = Clock::now() + kCloseDeadline;
  try {
    // The lease's keys go with it, in one request, and the peers' watches see them deleted.
    if (lease_ != 0) client_->revokeLease(lease_, deadline);
  } catch (const std::exception&) {
    // Its TTL ends it.
  }
  for (const auto& [key, held] : held_) {
    if (held.leased) continue;
    try {
      // A ttl-0 hold is a plain key: deleted only while it still holds this store's value.
      client_->txn(Txn()
                       .when(Compare::value(key, Compare::Result::kEqual, held.value))
                       .when(Compare::lease(key, Compare::Result::kEqual, 0))
                       .then(DeleteRequest{KeyRange::single(key)}),
                   deadline);
    } catch (const std::exception&) {
      // Best effort: an unreachable etcd keeps it.
    }
  }
}

std::string EtcdStore::full(std::string_view key) const { return keyPrefix_ + std::string(key); }

std::vector<std::string> EtcdStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> fullKeys;
  fullKeys.reserve(keys.size());
  for (const std::string& key : keys) fullKeys.push_back(full(key));
  return fullKeys;
}

etcd::Deadline EtcdStore::requestDeadline() const {
  return Clock::now() + client_->options().timeout;
}

void EtcdStore::set(std::string_view key, std::string_view value) {
  guarded(fmt::format("set {}", common::shownKey(key)), [&] {
    client_->put(PutRequest{full(key), std::string(value)});
  });
}

namespace {

// Runs job(0) .. job(count - 1), up to kTxnsInFlight at once: this thread and as many more as
// help. Once one throws, no further job starts (those already taken run to their end, bounded
// by the deadline they share); the first exception is rethrown after all have ended.
void inFlight(std::size_t count, const std::function<void(std::size_t)>& job) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::exception_ptr failure;
  const auto work = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        job(i);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(kTxnsInFlight);  // no reallocation below: a failed start leaves the rest joinable
  for (std::size_t t = 1; t < std::min(count, kTxnsInFlight); ++t) {
    try {
      helpers.emplace_back(work);
    } catch (...) {
      break;  // no thread to be had (system_error, bad_alloc): fewer in flight
    }
  }
  work();
  for (std::thread& helper : helpers) helper.join();
  if (failure) std::rethrow_exception(failure);
}

// The keys read in transactions of ranges (one request for up to kMaxTxnOps keys), several in
// flight: each key's value where it exists, and the revision of the earliest transaction (a watch
// from just after it misses nothing that happened to any of the keys after they were read; a
// key read later has its events since replayed, which lead to the state it was read in).
struct ReadKeys {
  Revision revision = 0;
  std::map<std::string, KeyValue> present;
};

ReadKeys readEach(etcd::EtcdClient& client, const std::vector<std::string>& keys, bool countOnly,
                  etcd::Deadline deadline) {
  const std::size_t chunks = (keys.size() + kMaxTxnOps - 1) / kMaxTxnOps;
  std::vector<TxnResult> results(chunks);
  inFlight(chunks, [&](std::size_t chunk) {
    Txn txn;
    const std::size_t end = std::min(keys.size(), (chunk + 1) * kMaxTxnOps);
    for (std::size_t i = chunk * kMaxTxnOps; i < end; ++i) {
      RangeRequest request{KeyRange::single(keys[i])};
      request.countOnly = countOnly;
      txn.then(request);
    }
    results[chunk] = client.txn(txn, deadline);
  });
  ReadKeys read;
  for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
    const TxnResult& result = results[chunk];
    if (chunk == 0 || result.header.revision < read.revision)
      read.revision = result.header.revision;
    const std::size_t first = chunk * kMaxTxnOps;
    const std::size_t end = std::min(keys.size(), first + kMaxTxnOps);
    for (std::size_t i = first; i < end; ++i) {
      const RangeResult& range = rangeOf(result, i - first);
      if (countOnly ? range.count > 0 : !range.kvs.empty()) {
        KeyValue kv;
        if (countOnly) {
          kv.key = keys[i];
        } else {
          kv = range.kvs.front();
        }
        read.present[keys[i]] = std::move(kv);
      }
    }
  }
  return read;
}

}  // namespace

namespace detail {

// One watch kept between blocking calls on the same range. Membership waits for a round's stop
// key, and its LapseReporter for the members' alive keys, in short slices so that they notice a
// cancel; a new watch each slice would be a stream on a connection of its own and a watcher etcd
// creates and cancels, several a second for every agent. A kept watch is used while its member
// was heard from within its silence check's interval (EtcdWatch::lastHeard: the stream, or any
// answer to the same client, such as the agent's keep-alives), not only while the read it was
// made for is recent: that read ages within seconds, and replacing every kept watch that often
// is a large share of etcd's requests when a large job re-forms. The check itself needs more of a
// call's time than a short slice gives (etcd_watch.cc), so once the member has been quiet that
// long the next call reads again, and keeps the stream if that read's answer came from the
// stream's member (a new watch if not). The stream's own connection is not proven by the
// member's answers: the watch makes itself again after a minute with no message of its own
// (WatchRequest::remakeAfterSilence).
//
// A slice that timed out also leaves what it saw of its keys (the view: its read, with the
// events it consumed applied). The next slice on the same keys starts from that view instead of
// reading again: the stream has run on from it without a gap, so anything since is among the
// events still to come. A read every slice, from every agent of a job on one shared etcd, is load
// enough to keep a re-form from finishing. A slice that found what it waited for leaves no view
// (the caller moves on, and the keys may change before it asks again): the next one reads.
//
// A slice whose read alone outlasted it leaves its view without a watch, and the next slice makes
// the watch from the view's revision instead of reading again. On a loaded etcd a read can take
// longer than a slice: slices that each read, ran out of time and kept nothing would read again
// and again, their reads the very load that makes them slow.
class WatchKeeper {
 public:
  struct Kept {
    std::unique_ptr<etcd::EtcdWatch> watch;  // none: make one (from the view's revision, if any)
    Clock::time_point since;         // the read it was made for (a view's age, without a watch)
    std::optional<ReadKeys> view;    // what a timed-out call saw, up to the stream's end
    std::set<std::string> viewKeys;  // the keys that call waited on
  };

  // The kept watch if it is on `range`, young enough and not past `start` (the revision after
  // the caller's read; never past it: the read is linearizable and the watch's events were
  // committed before it, but a watch that were would have skipped events).
  Kept take(const KeyRange& range, Revision start) {
    std::lock_guard lock(mutex_);
    Kept kept = std::move(kept_);
    kept_ = {};
    if (!kept.watch || kept.watch->nextRevision() > start || !sameRange(range) || tooOld(kept))
      return {};
    kept.view.reset();
    return kept;
  }
  // The kept view, with its watch if it has one, if the call that left it waited on exactly
  // `keys` (on `range`) and it is young enough; else none, and the caller reads.
  Kept resume(const KeyRange& range, const std::set<std::string>& keys) {
    std::lock_guard lock(mutex_);
    if (!kept_.view || kept_.viewKeys != keys || !sameRange(range) || tooOld(kept_)) return {};
    Kept kept = std::move(kept_);
    kept_ = {};
    return kept;
  }
  // Keeps a healthy watch, or a view whose watch is still to be made, for the next call (the last
  // one given wins).
  void give(const KeyRange& range, Kept kept) {
    std::lock_guard lock(mutex_);
    range_ = range;
    kept_ = std::move(kept);
  }

 private:
  static constexpr auto kKeepFor = etcd::WatchRequest{}.checkAfterSilence;
  bool sameRange(const KeyRange& range) const {
    return range.key == range_.key && range.rangeEnd == range_.rangeEnd;
  }
  static bool tooOld(const Kept& kept) {
    return Clock::now() - (kept.watch ? kept.watch->lastHeard() : kept.since) >= kKeepFor;
  }
  std::mutex mutex_;
  KeyRange range_;
  Kept kept_;
};

}  // namespace detail

// Reads `keys`, then follows their changes from the read's revision: `onRead` is given what the
// read found, `onEvents` each batch of events on the keys; either returns true when the wait is
// over. False when `deadline` passes first. A compaction that took the history the watch needs
// reads again; a watch that no member serves for a whole request timeout is a
// StoreConnectionError. The watch comes from `keeper` where it has one for these keys, and goes
// back to it when the call ends with the stream healthy; a call that timed out leaves its view
// too, and the next call on the same keys starts from it without reading (WatchKeeper).
static bool follow(etcd::EtcdClient& client, detail::WatchKeeper& keeper,
                   const std::vector<std::string>& keys, etcd::Deadline deadline,
                   const std::string& what, const std::function<bool(const ReadKeys&)>& onRead,
                   const std::function<bool(const std::vector<etcd::WatchEvent>&)>& onEvents) {
  const auto requestTimeout = client.options().timeout;
  const std::set<std::string> wanted(keys.begin(), keys.end());
  etcd::WatchRequest request;
  request.range = covering(keys);
  detail::WatchKeeper::Kept resumed = keeper.resume(request.range, wanted);
  // A call that timed out gives its watch back with what it saw of the keys.
  const auto keepWithView = [&](detail::WatchKeeper::Kept kept, ReadKeys view) {
    kept.view = std::move(view);
    kept.viewKeys = wanted;
    keeper.give(request.range, std::move(kept));
  };
  for (;;) {
    detail::WatchKeeper::Kept kept;
    ReadKeys read;
    const bool fromView = resumed.view.has_value();
    if (fromView) {
      kept = std::move(resumed);
      resumed = {};
      read = std::move(*kept.view);
      kept.view.reset();
    } else {
      // The read a view rests on: a view left without its watch is read again after kKeepFor.
      kept.since = Clock::now();
      read = guarded(what,
                     [&] { return readEach(client, keys, false, Clock::now() + requestTimeout); });
    }
    if (onRead(read)) {
      if (kept.watch) keeper.give(request.range, std::move(kept));
      return true;
    }
    if (!kept.watch) {
      request.startRevision = read.revision + 1;
      if (detail::WatchKeeper::Kept held = keeper.take(request.range, request.startRevision);
          held.watch) {
        kept = std::move(held);
      }
    }
    // A read that outlasted the call leaves its view for the next call, which watches from it. A
    // view taken without its watch makes the watch now, even past the deadline: a view is only
    // good with a stream from its revision, and a call that only ever looked at it would never
    // see a change.
    if (Clock::now() >= deadline && !(fromView && !kept.watch)) {
      keepWithView(std::move(kept), std::move(read));
      return false;
    }
    if (!kept.watch) {
      kept.watch = guarded(what, [&]() -> std::unique_ptr<etcd::EtcdWatch> {
        try {
          return client.watch(request, Clock::now() + requestTimeout);
        } catch (const EtcdError& error) {
          // A kept view's revision may be compacted away by now (etcd keeps a view's read, not
          // its history): read again.
          if (fromView && error.code() == EtcdError::Code::kCompacted) return nullptr;
          throw;
        }
      });
      if (!kept.watch) continue;
    }
    etcd::EtcdWatch* watch = kept.watch.get();
    std::optional<Clock::time_point> troubleSince;
    bool reread = false;
    while (!reread) {
      const auto now = Clock::now();
      if (now >= deadline) {
        keepWithView(std::move(kept), std::move(read));
        return false;
      }
      std::optional<etcd::WatchBatch> batch;
      try {
        // In slices of a request timeout, so that a watch no member takes back is noticed.
        batch = watch->next(std::min<etcd::Deadline>(deadline, now + requestTimeout));
      } catch (const EtcdError& error) {
        if (error.code() == EtcdError::Code::kCompacted) {
          reread = true;  // events were lost: read again, watch from the new revision
          continue;
        }
        if (!isOutage(error.code())) rethrow(error, what);
        // The watch resumes itself on the next member; it failed only if none took it back
        // within a slice. Give up once that has lasted a whole request timeout, as a request
        // would have.
        const auto failedAt = Clock::now();
        if (!troubleSince) {
          troubleSince = failedAt;
        } else if (failedAt - *troubleSince >= requestTimeout) {
          rethrow(error, what);
        }
        continue;
      }
      troubleSince.reset();
      if (!batch) continue;
      std::vector<etcd::WatchEvent> events;
      for (etcd::WatchEvent& event : batch->events) {
        // A kept watch may deliver changes the read already saw (a delete's kv carries its
        // revision too).
        if (wanted.count(event.kv.key) != 0 && event.kv.modRevision > read.revision) {
          events.push_back(std::move(event));
        }
      }
      // The view moves with the stream: what the next call would have read. Its revision stays
      // the read's, the line below which a kept stream's events are old news; the stream
      // delivers nothing twice.
      for (const etcd::WatchEvent& event : events) {
        if (event.type == etcd::WatchEvent::Type::kDelete) {
          read.present.erase(event.kv.key);
        } else {
          read.present[event.kv.key] = event.kv;
        }
      }
      if (!events.empty() && onEvents(events)) {
        keeper.give(request.range, std::move(kept));
        return true;
      }
    }
  }
}

std::map<std::string, std::string> EtcdStore::waitFor(const std::vector<std::string>& fullKeys,
                                                      Duration timeout, std::string_view what) {
  std::map<std::string, std::string> values;
  if (fullKeys.empty()) return values;
  const etcd::Deadline deadline = Clock::now() + timeout;
  std::set<std::string> missing;
  // A key seen once counts as appeared, even if it is deleted again while others are missing.
  const bool done = follow(
      *client_, *keeper_, fullKeys, deadline, std::string(what),
      [&](const ReadKeys& read) {
        missing.clear();
        for (const std::string& key : fullKeys) {
          auto it = read.present.find(key);
          if (it != read.present.end()) {
            values[key] = it->second.value;
          } else if (values.count(key) == 0) {
            missing.insert(key);
          }
        }
        return missing.empty();
      },
      [&](const std::vector<etcd::WatchEvent>& events) {
        for (const etcd::WatchEvent& event : events) {
          if (event.type == etcd::WatchEvent::Type::kPut && missing.erase(event.kv.key) != 0) {
            values[event.kv.key] = event.kv.value;
          }
        }
        return missing.empty();
      });
  if (!done) {
    std::string names;
    for (const std::string& key : missing) {
      names += (names.empty() ? "" : ", ") +
               common::shownKey(std::string_view(key).substr(keyPrefix_.size()));
    }
    throw StoreTimeoutError(fmt::format("etcd store: {}: {} not set within {} ms (keys under {})",
                                        what, names, timeout.count(),
                                        common::shownKey(keyPrefix_)));
  }
  return values;
}

std::string EtcdStore::get(std::string_view key) {
  const std::string fullKey = full(key);
  return waitFor({fullKey}, timeout(), fmt::format("get {}", common::shownKey(key))).at(fullKey);
}

std::optional<std::string> EtcdStore::tryGet(std::string_view key) {
  std::optional<KeyValue> current = guarded(fmt::format("tryGet {}", common::shownKey(key)),
                                            [&] { return client_->get(full(key)); });
  if (!current) return std::nullopt;
  return std::move(current->value);
}

std::vector<std::string> EtcdStore::multiGet(const std::vector<std::string>& keys) {
  const std::vector<std::string> fullKeys = full(keys);
  const std::map<std::string, std::string> found =
      waitFor(fullKeys, timeout(),
              keys.size() == 1 ? fmt::format("multiGet {}", common::shownKey(keys.front()))
                               : fmt::format("multiGet of {} keys", keys.size()));
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : fullKeys) values.push_back(found.at(key));
  return values;
}

void EtcdStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const std::vector<std::string> fullKeys = full(keys);
  waitFor(fullKeys, timeout,
          keys.size() == 1 ? fmt::format("wait {}", common::shownKey(keys.front()))
                           : fmt::format("wait for {} keys", keys.size()));
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  const std::vector<std::string> fullKeys = full(keys);
  const ReadKeys read = guarded(fmt::format("check {} keys", keys.size()), [&] {
    return readEach(*client_, fullKeys, true, requestDeadline());
  });
  return std::all_of(fullKeys.begin(), fullKeys.end(),
                     [&](const std::string& key) { return read.present.count(key) != 0; });
}

bool EtcdStore::deleteKey(std::string_view key) {
  // After an uncertain attempt `deleted` is what the retry found: 0 when that attempt already
  // deleted the key. The key is gone either way; whether it existed is then unknown, and the
  // answer is false.
  return guarded(fmt::format("deleteKey {}", common::shownKey(key)), [&] {
    return client_->deleteRange(DeleteRequest{KeyRange::single(full(key))}).deleted > 0;
  });
}

std::int64_t EtcdStore::numKeys() {
  return guarded("numKeys", [&] {
    RangeRequest request{KeyRange::prefix(keyPrefix_)};
    request.countOnly = true;
    return client_->range(request).count;
  });
}

namespace {

// Full jitter: a pause drawn from [0, min(64, 2^attempt) ms).
void raceBackoff(int attempt) {
  thread_local std::mt19937 random(std::random_device{}());
  const int ceilingUs = 1000 << std::min(attempt, 6);
  std::uniform_int_distribution<int> pause(0, ceilingUs - 1);
  std::this_thread::sleep_for(std::chrono::microseconds(pause(random)));
}

// A read-modify-write of one key: `next` computes the new value from the current one (nothing
// for a missing key); the write is a transaction guarded by the key's mod revision (or its
// absence), so it applies only to the value it was computed from, and a repeated attempt (the
// client fails a write over to the next member) fails its guard instead of applying twice.
// A lost race reads the key from the failed transaction's other branch and computes again.
// Returns the value written.
std::string readModifyWrite(
    etcd::EtcdClient& client, const std::string& key, const std::string& what,
    const std::function<std::string(const std::optional<KeyValue>&)>& next) {
  return guarded(what, [&] {
    std::optional<KeyValue> base = client.get(key);
    for (int attempt = 0; attempt < kMaxRaceRetries; ++attempt) {
      const std::string written = next(base);
      Txn txn;
      txn.when(base ? Compare::modRevision(key, Compare::Result::kEqual, base->modRevision)
                    : Compare::absent(key))
          .then(PutRequest{key, written})
          .otherwise(RangeRequest{KeyRange::single(key)});
      const TxnResult result = client.txn(txn);
      if (result.succeeded) return written;
      std::optional<KeyValue> now = onlyKv(rangeOf(result));
      if (result.afterUncertainAttempt && !certainlyNotApplied(base, now, written)) {
        throw StoreConnectionError(fmt::format(
            "etcd store: {}: the write was sent to a member that failed mid-request, and the key "
            "now holds what it may have written: the outcome is unknown",
            what));
      }
      base = std::move(now);
      // Lost the race: every writer that lost it retrying at once loses it again, each failed
      // guarded write a raft proposal of its own (N joiners counting themselves in at once make
      // O(N^2) of them). A random pause, up to 1 ms doubling to 64 ms, spreads them out.
      raceBackoff(attempt);
    }
    throw StoreError(
        fmt::format("etcd store: {}: other writers changed the key {} times in a row "
                    "between its read and its write; nothing was written",
                    what, kMaxRaceRetries));
  });
}

}  // namespace

std::int64_t EtcdStore::add(std::string_view key, std::int64_t delta) {
  std::int64_t sum = 0;
  const std::string what = fmt::format("add {}", common::shownKey(key));
  if (delta == 0) {
    // Adding 0 is how a c10d client reads a counter. Where the counter exists that is a read
    // alone: writing the same value back would be a raft commit that moves the key's revision
    // and fails every concurrent adder's guarded write, so N joiners polling a join counter would
    // make their own joins retry O(N^2) times. A missing counter is created at 0 below, as c10d
    // does.
    const std::optional<KeyValue> current = guarded(what, [&] { return client_->get(full(key)); });
    if (current) {
      const std::optional<std::int64_t> parsed = parseCounter(current->value);
      if (!parsed) {
        throw StoreError(fmt::format("etcd store: {}: the key holds '{}', not a number", what,
                                     common::printablePrefix(current->value)));
      }
      return *parsed;
    }
  }
  readModifyWrite(*client_, full(key), what, [&](const std::optional<KeyValue>& current) {
    std::int64_t value = 0;
    if (current) {
      const std::optional<std::int64_t> parsed = parseCounter(current->value);
      if (!parsed) {
        throw StoreError(fmt::format("etcd store: {}: the key holds '{}', not a number", what,
                                     common::printablePrefix(current->value)));
      }
      value = *parsed;
    }
    // Two's-complement wrap-around, as torch's int64 addition does in practice.
    sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(value) +
                                    static_cast<std::uint64_t>(delta));
    return std::to_string(sum);
  });
  return sum;
}

// A ticket is a put, not a guarded increment: `add` reads, then writes guarded by the read's
// mod revision, so of N concurrent adders one wins each round and the others' failed guards are
// raft proposals too: O(N^2) of them for N joiners. etcd counts the puts to a key in its
// version (1 at creation, +1 a put, back to 1 after a delete), and a put that asks for the
// previous value learns which version it made: N takers, N proposals, none lost to a race.
//
// The put must apply once even when it is sent twice: the client repeats a call whose attempt got
// no clear answer (a member that failed mid-request, or answered after the attempt's 2 s), and
// under load that is common. A blind put repeated after its first attempt applied and another
// taker's put came between would take a second number and leave the first to nobody, and a join
// slot nobody fills stalls the round: Membership::liveJoiners reads slots 1..count, a counted
// slot without its member key is "a joiner has counted itself, not written its id", and the round
// does not close until join_timeout (membership.cc, takeSlot/waitForClose). So the put goes in a
// transaction with a marker key of this call's own (a random name under the ticket key), guarded
// by the marker's absence: the put and the marker apply together, once. A repeat that finds the
// marker learns its ticket from the marker's create revision, which is the revision of the put:
// the ticket key's version at that revision. The transaction is idempotent, so a call that fails
// with its outcome unknown is tried once more (it applies then, or finds the marker) before it is
// a StoreConnectionError. The markers (a few bytes each) go with the ticket key's prefix: a
// round's keys are deleted with the round, the run's with the run.
std::int64_t EtcdStore::takeTicket(std::string_view key) {
  const std::string fullKey = full(key);
  const std::string what = fmt::format("takeTicket {}", common::shownKey(key));
  const std::string marker = fullKey + "/ticket/" + common::randomHexId();
  Txn txn;
  txn.when(Compare::absent(marker))
      .then(PutRequest{fullKey, "", 0, true})
      .then(PutRequest{marker, ""})
      .otherwise(RangeRequest{KeyRange::single(marker)});
  for (int attempt = 0;; ++attempt) {
    try {
      const TxnResult result = client_->txn(txn);
      if (result.succeeded) {
        if (result.responses.empty() ||
            !std::holds_alternative<PutResult>(result.responses.front())) {
          throw StoreError("etcd store: " + what +
                           ": a transaction's answer lacks the put it asked for");
        }
        const std::optional<KeyValue>& previous =
            std::get<PutResult>(result.responses.front()).prevKv;
        return previous ? previous->version + 1 : 1;
      }
      // An earlier attempt of this call applied, its answer lost.
      const std::optional<KeyValue> mark = onlyKv(rangeOf(result));
      if (!mark) {
        throw StoreError("etcd store: " + what +
                         ": the transaction's read lacks the marker its guard found");
      }
      RangeRequest then{KeyRange::single(fullKey)};
      then.revision = mark->createRevision;
      const RangeResult atPut = client_->range(then);
      if (atPut.kvs.empty()) {
        throw StoreError("etcd store: " + what +
                         ": the ticket key is missing at its marker's revision");
      }
      return atPut.kvs.front().version;
    } catch (const EtcdError& error) {
      if (error.code() == EtcdError::Code::kCompacted) {
        // The history of the put is gone (a shared etcd compacts every few minutes): which
        // number this call took cannot be told.
        throw StoreConnectionError(fmt::format(
            "etcd store: {}: the take applied with its answer lost, and etcd has compacted the "
            "revision that says which number it took: the outcome is unknown: {}",
            what, error.what()));
      }
      if (!error.outcomeUnknown()) rethrow(error, what);
      if (attempt >= 1) {
        throw StoreConnectionError(fmt::format(
            "etcd store: {}: twice sent to a member that failed mid-request: whether a number was "
            "taken is unknown: {}",
            what, error.what()));
      }
    }
  }
}

std::int64_t EtcdStore::ticketCount(std::string_view key) {
  // One read, no write (add(key, 0) creates a missing counter, as c10d does; a ticket key needs
  // no creating: missing is 0).
  const std::optional<KeyValue> current =
      guarded(fmt::format("ticketCount {}", common::shownKey(key)),
              [&] { return client_->get(full(key)); });
  return current ? current->version : 0;
}

void EtcdStore::append(std::string_view key, std::string_view value) {
  readModifyWrite(*client_, full(key), fmt::format("append {}", common::shownKey(key)),
                  [&](const std::optional<KeyValue>& current) {
                    return (current ? current->value : std::string()) + std::string(value);
                  });
}

std::string EtcdStore::compareSet(std::string_view key, std::string_view expected,
                                  std::string_view desired) {
  const std::string fullKey = full(key);
  return guarded(fmt::format("compareSet {}", common::shownKey(key)), [&]() -> std::string {
    // c10d: a missing key is created only when `expected` is empty; an existing key is swapped
    // when it holds `expected` (an empty value matches an empty `expected`). etcd compares no
    // value of a missing key, so "missing or empty" is two guards, tried in turn: absent first
    // (the usual create-if-absent), then an existing empty value. A key that changes between
    // them is tried again (bounded: each lost race is another writer's write).
    // After an uncertain attempt a failed guard may be our own swap: the key then holds
    // `desired`, which is the answer either way.
    for (int attempt = 0; attempt < kMaxRaceRetries; ++attempt) {
      if (expected.empty()) {
        const TxnResult created =
            client_->txn(Txn()
                             .when(Compare::absent(fullKey))
                             .then(PutRequest{fullKey, std::string(desired)})
                             .otherwise(RangeRequest{KeyRange::single(fullKey)}));
        if (created.succeeded) return std::string(desired);
        const std::optional<KeyValue> now = onlyKv(rangeOf(created));
        if (!now) continue;  // deleted meanwhile: create it
        if (!now->value.empty()) return now->value;
      }
      const TxnResult swapped = client_->txn(
          Txn()
              .when(Compare::value(fullKey, Compare::Result::kEqual, std::string(expected)))
              .then(PutRequest{fullKey, std::string(desired)})
              .otherwise(RangeRequest{KeyRange::single(fullKey)}));
      if (swapped.succeeded) return std::string(desired);
      const std::optional<KeyValue> now = onlyKv(rangeOf(swapped));
      if (now) return now->value;
      if (!expected.empty()) return std::string(expected);  // missing: not created
      // Empty expected, and the key went between the two guards: create it.
    }
    throw StoreError(
        fmt::format("etcd store: compareSet {}: the key changed {} times in a row "
                    "between its guards; nothing was written",
                    common::shownKey(key), kMaxRaceRetries));
  });
}

void EtcdStore::multiSet(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw StoreError(fmt::format("multiSet: {} keys but {} values", keys.size(), values.size()));
  }
  // Transactions of puts, fewer requests than a put each: at most kMaxTxnOps puts and about
  // kMaxTxnBytes in each, and no key twice in one (etcd refuses that; the later put of a key
  // goes in a later transaction, so the last value wins, as with set() one by one). Several in
  // flight when no key is named twice (a closer's seats); else one after another, in order.
  std::vector<Txn> txns;
  std::set<std::string> named;
  bool repeats = false;
  std::size_t i = 0;
  while (i < keys.size()) {
    Txn txn;
    std::set<std::string> inTxn;
    std::size_t bytes = 0;
    for (; i < keys.size() && txn.success.size() < kMaxTxnOps; ++i) {
      const std::string fullKey = full(keys[i]);
      const std::size_t size = fullKey.size() + values[i].size();
      if (!txn.success.empty() && (bytes + size > kMaxTxnBytes || inTxn.count(fullKey) != 0)) break;
      bytes += size;
      inTxn.insert(fullKey);
      repeats = !named.insert(fullKey).second || repeats;
      txn.then(PutRequest{fullKey, values[i]});
    }
    txns.push_back(std::move(txn));
  }
  guarded(fmt::format("multiSet of {} keys", keys.size()), [&] {
    if (repeats) {
      for (const Txn& txn : txns) client_->txn(txn);
    } else {
      inFlight(txns.size(), [&](std::size_t k) { client_->txn(txns[k]); });
    }
  });
}

ListedKeys EtcdStore::listPrefix(std::string_view prefix, std::size_t maxKeys) {
  const std::string what = fmt::format("listPrefix {}", common::shownKey(prefix));
  return guarded(what, [&] {
    ListedKeys listed;
    RangeRequest request{KeyRange::prefix(full(prefix))};
    if (maxKeys == 0) {
      // Only whether any key matches: one count.
      request.countOnly = true;
      request.limit = 1;
      listed.more = client_->range(request).count > 0;
      return listed;
    }
    request.keysOnly = true;
    request.limit = static_cast<std::int64_t>(std::min(maxKeys, kMaxListedKeys));
    RangeResult range = client_->range(request);
    listed.more = range.more;
    std::size_t bytes = 0;
    for (KeyValue& kv : range.kvs) {
      std::string key = kv.key.substr(keyPrefix_.size());
      if (!listed.keys.empty() && bytes + key.size() > kMaxListedBytes) {
        listed.more = true;
        break;
      }
      bytes += key.size();
      listed.keys.push_back(std::move(key));
    }
    return listed;
  });
}

std::vector<std::string> EtcdStore::listKeys() {
  // Every key under the prefix, a page at a time, every page read at the first page's revision:
  // one moment's keys. Bounded like deletePrefix's pages in Store (more keys than a store holds).
  constexpr int kMaxPages = 4096;
  return guarded("listKeys", [&] {
    std::vector<std::string> keys;
    RangeRequest request{KeyRange::prefix(keyPrefix_)};
    request.keysOnly = true;
    request.limit = static_cast<std::int64_t>(kMaxListedKeys);
    for (int page = 0; page < kMaxPages; ++page) {
      const RangeResult range = client_->range(request);
      for (const KeyValue& kv : range.kvs) keys.push_back(kv.key.substr(keyPrefix_.size()));
      if (!range.more || range.kvs.empty()) break;
      request.revision = range.header.revision;
      request.range.key = range.kvs.back().key + std::string(1, '\0');
    }
    return keys;
  });
}

std::int64_t EtcdStore::deletePrefix(std::string_view prefix) {
  return guarded(fmt::format("deletePrefix {}", common::shownKey(prefix)), [&] {
    return client_->deleteRange(DeleteRequest{KeyRange::prefix(full(prefix))}).deleted;
  });
}

std::optional<std::chrono::seconds> EtcdStore::leaseTtl() const {
  std::lock_guard lock(holdMutex_);
  return leaseTtl_;
}

std::optional<EtcdStore::Clock::time_point> EtcdStore::lastAcknowledgedRenewalSent() const {
  std::lock_guard lock(holdMutex_);
  return lastAcknowledgedRenewalSent_;
}

std::string EtcdStore::hold(std::string_view key, std::string_view value,
                            std::chrono::milliseconds ttl, std::string_view, std::string_view) {
  // The notify pair is ignored: etcd only deletes a lapsed hold's key (kKeyDeletedOnly).
  std::lock_guard lock(holdMutex_);
  const std::string fullKey = full(key);
  return guarded(fmt::format("hold {}", common::shownKey(key)),
                 [&] { return holdLocked(fullKey, value, ttl); });
}

std::string EtcdStore::holdLocked(const std::string& key, std::string_view value,
                                  std::chrono::milliseconds ttl) {
  const std::string wanted(value);
  if (ttl.count() <= 0) {
    // A plain key, created if absent; whoever created it holds it.
    const TxnResult result = client_->txn(Txn()
                                              .when(Compare::absent(key))
                                              .then(PutRequest{key, wanted})
                                              .otherwise(RangeRequest{KeyRange::single(key)}));
    const std::optional<KeyValue> now = result.succeeded ? std::nullopt : onlyKv(rangeOf(result));
    // After an uncertain attempt, our own creation shows as the key at our value, unleased.
    if (result.succeeded ||
        (result.afterUncertainAttempt && now && now->value == wanted && now->lease == 0)) {
      held_[key] = Held{wanted, false};
      return wanted;
    }
    return now ? now->value : wanted;
  }

  auto mine = held_.find(key);
  if (mine != held_.end() && mine->second.leased && lease_ != 0 && mine->second.value == wanted) {
    // A renewal: one keep-alive request. Its send time, once acknowledged, is what the fencing
    // rule counts from (the lease runs at least its TTL from the moment the request left).
    const Clock::time_point sent = Clock::now();
    try {
      client_->keepAliveOnce(lease_);
    } catch (const EtcdError& error) {
      if (error.code() != EtcdError::Code::kNotFound) throw;
      // The lease expired: etcd has deleted our keys, and the peers may already have reported
      // this node lost. Forget it; a later hold starts a new lease.
      const etcd::LeaseId expired = lease_;
      lease_ = 0;
      std::erase_if(held_, [](const auto& entry) { return entry.second.leased; });
      throw StoreConnectionError(fmt::format(
          "etcd store: hold {}: the lease {} expired before this renewal reached etcd (no "
          "renewal acknowledged within its {} s TTL): etcd has deleted this node's held keys, "
          "and the others count it as lost",
          common::shownKey(std::string_view(key).substr(keyPrefix_.size())), expired,
          leaseTtl_ ? leaseTtl_->count() : 0));
    }
    lastAcknowledgedRenewalSent_ = sent;
    return wanted;
  }

  for (int attempt = 0; attempt < 2; ++attempt) {
    if (lease_ == 0) {
      // ceil(ttl) seconds: a lease never ends sooner than the hold asked for. etcd may raise it
      // to its minimum; what it granted is kept (leaseTtl()).
      const std::int64_t seconds = std::max<std::int64_t>(1, (ttl.count() + 999) / 1000);
      const Clock::time_point sent = Clock::now();
      const etcd::LeaseGrant grant = client_->grantLease(seconds);
      lease_ = grant.id;
      leaseTtl_ = std::chrono::seconds(grant.ttlSeconds);
      lastAcknowledgedRenewalSent_ = sent;
    }
    try {
      // Ours if absent, or already bound to our lease (a value change, or an earlier attempt of
      // this very call that applied): two guards, since a transaction's compares only AND.
      TxnResult result = client_->txn(Txn()
                                          .when(Compare::absent(key))
                                          .then(PutRequest{key, wanted, lease_})
                                          .otherwise(RangeRequest{KeyRange::single(key)}));
      if (!result.succeeded) {
        const std::optional<KeyValue> now = onlyKv(rangeOf(result));
        if (now && now->lease != lease_) {
          held_.erase(key);
          return now->value;  // someone else holds it
        }
        result = client_->txn(Txn()
                                  .when(Compare::lease(key, Compare::Result::kEqual, lease_))
                                  .then(PutRequest{key, wanted, lease_})
                                  .otherwise(RangeRequest{KeyRange::single(key)}));
        if (!result.succeeded) {
          const std::optional<KeyValue> later = onlyKv(rangeOf(result));
          held_.erase(key);
          // Gone between the two guards (it was ours and lapsed or was deleted), or taken.
          if (!later) continue;
          return later->value;
        }
      }
      held_[key] = Held{wanted, true};
      return wanted;
    } catch (const EtcdError& error) {
      // A put with a lease etcd no longer has: the lease ran out while this store held nothing
      // with it (it renews only what it holds). With keys held, they lapsed with it: the node
      // is lost. Otherwise a new lease, once.
      if (error.code() != EtcdError::Code::kNotFound) throw;
      const bool heldKeys = std::any_of(held_.begin(), held_.end(),
                                        [](const auto& entry) { return entry.second.leased; });
      lease_ = 0;
      std::erase_if(held_, [](const auto& entry) { return entry.second.leased; });
      if (heldKeys) {
        throw StoreConnectionError(fmt::format(
            "etcd store: hold {}: this store's lease expired (no renewal within its {} s TTL): "
            "etcd has deleted this node's held keys, and the others count it as lost",
            common::shownKey(std::string_view(key).substr(keyPrefix_.size())),
            leaseTtl_ ? leaseTtl_->count() : 0));
      }
      if (attempt > 0) throw;
    }
  }
  throw StoreError(
      fmt::format("etcd store: hold {}: the key kept changing between the hold's guards",
                  common::shownKey(std::string_view(key).substr(keyPrefix_.size()))));
}

bool EtcdStore::release(std::string_view key) {
  std::lock_guard lock(holdMutex_);
  const std::string fullKey = full(key);
  auto mine = held_.find(fullKey);
  const bool plain = mine != held_.end() && !mine->second.leased;
  if (!plain && lease_ == 0) return false;
  return guarded(fmt::format("release {}", common::shownKey(key)), [&] {
    Txn txn;
    if (plain) {
      txn.when(Compare::value(fullKey, Compare::Result::kEqual, mine->second.value))
          .when(Compare::lease(fullKey, Compare::Result::kEqual, 0));
    } else {
      txn.when(Compare::lease(fullKey, Compare::Result::kEqual, lease_));
    }
    txn.then(DeleteRequest{KeyRange::single(fullKey)})
        .otherwise(RangeRequest{KeyRange::single(fullKey)});
    const TxnResult result = client_->txn(txn);
    const bool inBooks = mine != held_.end();
    if (inBooks) held_.erase(mine);
    if (result.succeeded) return true;
    // After an uncertain attempt, a key that is gone and that we held when we asked was
    // deleted by that attempt.
    return result.afterUncertainAttempt && !onlyKv(rangeOf(result)) && inBooks;
  });
}

std::vector<std::string> EtcdStore::waitForAnyMissing(const std::vector<std::string>& keys,
                                                      Duration timeout) {
  if (keys.empty()) return {};
  const std::vector<std::string> fullKeys = full(keys);
  std::set<std::string> missing;
  const auto answer = [&] {
    std::vector<std::string> inOrder;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (missing.count(fullKeys[i]) != 0) inOrder.push_back(keys[i]);
    }
    return inOrder;
  };
  const bool found = follow(
      *client_, *keeper_, fullKeys, Clock::now() + timeout,
      keys.size() == 1 ? fmt::format("waitForAnyMissing {}", common::shownKey(keys.front()))
                       : fmt::format("waitForAnyMissing of {} keys", keys.size()),
      [&](const ReadKeys& read) {
        missing.clear();
        for (const std::string& key : fullKeys) {
          if (read.present.count(key) == 0) missing.insert(key);
        }
        return !missing.empty();
      },
      [&](const std::vector<etcd::WatchEvent>& events) {
        // The keys missing once the batch is applied (a batch is one revision's changes or
        // several: the deletions of one lease's keys arrive together).
        for (const etcd::WatchEvent& event : events) {
          if (event.type == etcd::WatchEvent::Type::kDelete) {
            missing.insert(event.kv.key);
          } else {
            missing.erase(event.kv.key);
          }
        }
        return !missing.empty();
      });
  return found ? answer() : std::vector<std::string>{};
}

}  // namespace ddprun::rendezvous
