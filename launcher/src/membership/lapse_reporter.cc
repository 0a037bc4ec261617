#include "membership/lapse_reporter.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ddprun::launcher {
namespace {

// After a failed store call: the heartbeat decides whether the store is lost; until then this
// tries again at this pace.
constexpr auto kRetryPause = std::chrono::milliseconds(100);

}  // namespace

LapseReporter::LapseReporter(std::unique_ptr<rendezvous::HoldingStore> store)
    : store_(std::move(store)) {
  thread_.start([this] { run(); });
}

LapseReporter::~LapseReporter() { stop(); }

void LapseReporter::arm(std::string stopKey, std::vector<Watched> members) {
  {
    auto lock = thread_.lock();
    ++generation_;
    reported_ = false;
    stopKey_ = std::move(stopKey);
    members_ = std::move(members);
  }
  thread_.wake();
}

void LapseReporter::stop() { thread_.stop(); }

void LapseReporter::run() {
  auto lock = thread_.lock();
  for (;;) {
    if (!thread_.waitUntil(lock, [this] { return !reported_ && !members_.empty(); })) return;
    const std::uint64_t generation = generation_;
    const std::string stopKey = stopKey_;
    const std::vector<Watched> members = members_;
    lock.unlock();
    bool reported = false;
    bool failed = false;
    try {
      std::vector<std::string> keys;
      for (const Watched& member : members) keys.push_back(member.aliveKey);
      const std::vector<std::string> missing = store_->waitForAnyMissing(keys, kWatchSlice);
      if (!missing.empty()) {
        const auto lost = std::find_if(members.begin(), members.end(), [&](const Watched& member) {
          return member.aliveKey == missing.front();
        });
        // Create-if-absent: a stop already there (another peer's report, a failure, "done")
        // stays, and so does the round's first news.
        store_->compareSet(stopKey, "", lost->notice);
        reported = true;
      }
    } catch (const std::exception& error) {
      spdlog::debug("watching the round's members: {}", error.what());
      failed = true;
    }
    lock.lock();
    if (reported && generation == generation_) reported_ = true;
    if (failed) {
      thread_.waitFor(lock, kRetryPause, [&] { return generation != generation_; });
    }
  }
}

}  // namespace ddprun::launcher
