#include "membership/status_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

// What the failure's texts are cut to when a snapshot is too large (a very long message).
constexpr std::size_t kShortenedText = 1024;

void shorten(std::string& text) {
  if (text.size() > kShortenedText) text = text.substr(0, kShortenedText) + "...";
}

}  // namespace

std::string boundedSnapshotText(AgentSnapshot snapshot) {
  std::string text =
      toJson(snapshot).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= kMaxSnapshotBytes) return text;
  if (snapshot.lastFailure) {
    shorten(snapshot.lastFailure->message);
    shorten(snapshot.lastFailure->hangDetail);
    shorten(snapshot.lastFailure->oom);
    shorten(snapshot.lastFailure->errorFile);
    shorten(snapshot.lastFailure->evidenceFile);
  }
  for (Incident& incident : snapshot.incidents) {
    shorten(incident.detail);
    shorten(incident.host);
  }
  for (;;) {
    text = toJson(snapshot).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() <= kMaxSnapshotBytes || snapshot.workers.empty()) return text;
    snapshot.workers.resize(snapshot.workers.size() / 2);  // bounded: halves to none
  }
}

StatusPublisher::StatusPublisher(StoreBackend& backend, const std::string& runId,
                                 std::chrono::milliseconds callTimeout)
    : backend_(backend), keys_(runId), callTimeout_(callTimeout) {}

void StatusPublisher::startThreadLocked() {
  // The thread starts with the first snapshot: a job that ends before its first one (a launch of
  // no-op workers, under half a second) never pays for a thread that would write nothing.
  if (!thread_.running()) thread_.start([this] { run(); });
}

StatusPublisher::~StatusPublisher() {
  // A write in progress gives up within callTimeout (and a connection attempt within as long).
  thread_.stop();
}

void StatusPublisher::publish(const AgentSnapshot& snapshot, std::int64_t nodeId) {
  if (nodeId < 0) return;  // not a member yet: nothing to publish under
  std::string text = boundedSnapshotText(snapshot);
  {
    auto lock = thread_.lock();
    if (last_ || thread_.stopping()) return;
    pending_.emplace(nodeId, std::move(text));
    ++queued_;
    startThreadLocked();
  }
  thread_.wake();
}

bool StatusPublisher::publishLast(const AgentSnapshot& snapshot, std::int64_t nodeId,
                                  std::chrono::milliseconds patience) {
  if (nodeId < 0) return false;
  std::string text = boundedSnapshotText(snapshot);
  auto lock = thread_.lock();
  if (last_ || thread_.stopping()) return false;
  pending_.emplace(nodeId, std::move(text));
  const std::uint64_t mine = ++queued_;
  last_ = true;
  startThreadLocked();
  thread_.wake();
  // Ends early only at stop(), which the destructor alone asks: by then no caller may be in
  // here, and a stopped thread takes no more writes, so "not written" is the true answer.
  return thread_.waitFor(lock, patience, [&] { return settled_ >= mine; }) && lastWritten_;
}

void StatusPublisher::write(std::int64_t nodeId, const std::string& text) {
  if (!store_) store_ = backend_.connect(callTimeout_, callTimeout_);
  if (writtenId_ >= 0 && writtenId_ != nodeId) {
    // This agent rejoined as a new member: its old member's snapshot would show a node that is
    // no longer there.
    store_->deleteKey(keys_.status(writtenId_));
    writtenId_ = -1;
  }
  store_->set(keys_.status(nodeId), text);
  writtenId_ = nodeId;
}

void StatusPublisher::run() {
  for (;;) {
    std::pair<std::int64_t, std::string> next;
    std::uint64_t taken = 0;
    {
      auto lock = thread_.lock();
      if (!thread_.waitUntil(lock, [this] { return pending_.has_value(); })) return;
      next = std::move(*pending_);
      pending_.reset();
      taken = queued_;
    }
    try {
      write(next.first, next.second);
    } catch (const std::exception& error) {
      // The status is a view: a store that is slow or gone costs the job nothing. The next
      // snapshot (a few seconds on) tries again over a new connection.
      spdlog::debug("publishing this agent's status: {}", common::printable(error.what()));
      store_.reset();
      auto lock = thread_.lock();
      settled_ = std::max(settled_, taken);
      lastWritten_ = false;
      thread_.wake();
      continue;
    }
    {
      auto lock = thread_.lock();
      settled_ = std::max(settled_, taken);
      lastWritten_ = true;
    }
    thread_.wake();
  }
}

}  // namespace ddprun::launcher
