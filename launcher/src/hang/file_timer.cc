#include "hang/file_timer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/shown_text.h"
#include "ddprun/common/signal_names.h"

namespace ddprun::launcher {
namespace {

using nlohmann::json;
using WallTime = EventLoop::WallTime;

// Deadlines later than this (year 2255) are taken as this: system_clock counts nanoseconds in
// 64 bits, and no worker waits that long.
constexpr double kLatestDeadline = 9e9;
// The longest wait armed at once: a deadline further away is reached by re-arming when this one
// passes with nothing due, so no clock arithmetic ever nears its limits.
constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24);

// The instant a timer is due. Arming and the due check both go through this one conversion, so
// a timer armed for its deadline always finds itself due when it fires (no double rounding
// between "armed for" and "due at").
WallTime deadlineOf(double expirationTime) {
  const double seconds = std::min(expirationTime, kLatestDeadline);
  return WallTime(std::chrono::ceil<WallTime::duration>(std::chrono::duration<double>(seconds)));
}

// An integer member within [low, high], or an error naming the key.
template <typename T>
std::optional<T> integerMember(const json& object, const char* key, T low, T high,
                               std::string& why) {
  const auto it = object.find(key);
  if (it == object.end()) {
    why = std::string("no \"") + key + "\"";
    return std::nullopt;
  }
  // is_number_integer() is false for booleans and for floats such as 9.0: torch sends ints.
  if (!it->is_number_integer()) {
    why = std::string("\"") + key + "\" is not an integer";
    return std::nullopt;
  }
  bool inRange;
  if (it->is_number_unsigned()) {  // nlohmann keeps every non-negative integer as unsigned
    const auto value = it->get<std::uint64_t>();
    inRange = value <= static_cast<std::uint64_t>(high) &&
              (low <= 0 || value >= static_cast<std::uint64_t>(low));
  } else {
    const auto value = it->get<std::int64_t>();
    inRange = value >= low && value <= high;
  }
  if (!inRange) {
    why = std::string("\"") + key + "\" is out of range: " + it->dump();
    return std::nullopt;
  }
  return it->is_number_unsigned() ? static_cast<T>(it->get<std::uint64_t>())
                                  : static_cast<T>(it->get<std::int64_t>());
}

// One request line, or nothing with `why` saying what is wrong with it.
std::optional<FileTimerRequest> parseRequest(std::string_view line, std::string& why) {
  json object;
  try {
    object = json::parse(line);
  } catch (const json::exception& error) {
    why = std::string("not JSON (") + error.what() + ")";
    return std::nullopt;
  }
  if (!object.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  FileTimerRequest request;
  // torch's server ignores "version"; it is checked only when present, so a client that leaves
  // it out is served as torch would serve it.
  if (object.contains("version")) {
    const auto version = integerMember<int>(object, "version", std::numeric_limits<int>::min(),
                                            std::numeric_limits<int>::max(), why);
    if (!version) return std::nullopt;
    request.version = *version;
  }
  // A pid <= 0 is refused: kill(0 or -1, signal) would hit the agent's process group or every
  // process the agent may signal, where torch's server would obey it blindly.
  const auto pid = integerMember<pid_t>(object, "pid", 1, std::numeric_limits<pid_t>::max(), why);
  if (!pid) return std::nullopt;
  request.pid = *pid;

  const auto scope = object.find("scope_id");
  if (scope == object.end()) {
    why = "no \"scope_id\"";
    return std::nullopt;
  }
  if (!scope->is_string()) {
    why = "\"scope_id\" is not a string";
    return std::nullopt;
  }
  request.scopeId = scope->get<std::string>();

  const auto expiration = object.find("expiration_time");
  if (expiration == object.end()) {
    why = "no \"expiration_time\"";
    return std::nullopt;
  }
  if (!expiration->is_number()) {
    why = "\"expiration_time\" is not a number";
    return std::nullopt;
  }
  request.expirationTime = expiration->get<double>();
  if (!std::isfinite(request.expirationTime)) {
    why = "\"expiration_time\" is not finite";
    return std::nullopt;
  }

  const auto signal = integerMember<int>(object, "signal", std::numeric_limits<int>::min(),
                                         std::numeric_limits<int>::max(), why);
  if (!signal) return std::nullopt;
  request.signal = *signal;
  return request;
}

}  // namespace

std::optional<FileTimerRequest> parseFileTimerRequest(std::string_view line) {
  std::string why;
  return parseRequest(line, why);
}

FileTimers::FileTimers(EventLoop& loop, Expired expired)
    : loop_(loop), expired_(std::move(expired)) {}

void FileTimers::onLine(std::string_view line) {
  // A blank line requests nothing and is harmless: no warning.
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  std::string why;
  const auto request = parseRequest(line, why);
  if (!request) {
    // Both the line and the parser's account of it hold the worker's bytes.
    spdlog::warn("ddprun: ignoring a malformed FileTimer request ({}): {}", shown(why),
                 quotedValue(line));
    return;
  }
  apply(*request);
}

void FileTimers::apply(const FileTimerRequest& request) {
  auto key = std::make_pair(request.pid, request.scopeId);
  // torch: a negative expiration_time is a release.
  if (request.expirationTime < 0) {
    timers_.erase(key);
  } else {
    timers_.insert_or_assign(std::move(key), request);
  }
  rearm();
}

void FileTimers::forget(pid_t pid) {
  const auto [first, last] = timersOf(pid);
  timers_.erase(first, last);
  rearm();
}

std::pair<FileTimers::Map::iterator, FileTimers::Map::iterator> FileTimers::timersOf(pid_t pid) {
  const auto first = timers_.lower_bound({pid, std::string()});
  auto last = first;
  while (last != timers_.end() && last->first.first == pid) ++last;
  return {first, last};
}

void FileTimers::clear() {
  timers_.clear();
  rearm();
}

void FileTimers::pause() {
  if (pausedAt_) return;
  pausedAt_ = loop_.wallNow();
  timer_.reset();
}

void FileTimers::resume() {
  if (!pausedAt_) return;
  const double stopped = std::chrono::duration<double>(loop_.wallNow() - *pausedAt_).count();
  pausedAt_.reset();
  if (stopped > 0) {
    for (auto& [key, request] : timers_) request.expirationTime += stopped;
  }
  rearm();
}

void FileTimers::rearm() {
  // While expiries are being reported the timers change under fire(), which re-arms once after;
  // while the job is stopped nothing is armed (resume() re-arms).
  if (firing_ || pausedAt_) return;
  if (timers_.empty()) {
    timer_.reset();
    return;
  }
  WallTime earliest = WallTime::max();
  for (const auto& [key, request] : timers_)
    earliest = std::min(earliest, deadlineOf(request.expirationTime));
  // Already armed for it (a set or release that left the earliest deadline as it was).
  if (timer_ && armedFor_ == earliest) return;
  const auto wait = earliest - loop_.wallNow();
  // Rounded up: fired a fraction of a millisecond early, the timer would find nothing due.
  auto delay = std::chrono::ceil<std::chrono::milliseconds>(wait);
  delay = std::clamp(delay, std::chrono::milliseconds(0), kLongestWait);
  armedFor_ = earliest;
  timer_ = loop_.after(delay, [this] { fire(); });
}

void FileTimers::fire() {
  // The running Timer stays alive until fire() returns; nothing is armed meanwhile.
  const std::unique_ptr<EventLoop::Timer> running = std::move(timer_);
  const WallTime now = loop_.wallNow();
  auto due = [now](const FileTimerRequest& request) {
    return deadlineOf(request.expirationTime) <= now;
  };

  std::set<pid_t> duePids;
  for (const auto& [key, request] : timers_) {
    if (due(request)) duePids.insert(key.first);
  }
  firing_ = true;
  try {
    for (const pid_t pid : duePids) {
      // Looked up afresh for each pid: an earlier report may have forgotten, released or
      // replaced this pid's timers.
      const auto [first, last] = timersOf(pid);
      std::vector<const FileTimerRequest*> expired;
      for (auto it = first; it != last; ++it) {
        if (due(it->second)) expired.push_back(&it->second);
      }
      if (expired.empty()) continue;
      // torch's rule: of the pid's due timers, in expiration order, the first with a signal.
      std::stable_sort(expired.begin(), expired.end(), [](const auto* a, const auto* b) {
        return a->expirationTime < b->expirationTime;
      });
      const auto chosen = std::find_if(expired.begin(), expired.end(),
                                       [](const auto* request) { return request->signal > 0; });
      if (chosen == expired.end()) {
        // torch leaves such a worker alone and keeps its timers, finding them due again on every
        // pass. Dropping the due ones instead ends the same way (nothing is signalled, and a
        // later timer with a signal still fires) without waking again for them.
        spdlog::info("ddprun: FileTimer(s) of pid {} expired without a signal; not signalling it",
                     pid);
        for (const FileTimerRequest* request : expired) timers_.erase({pid, request->scopeId});
        continue;
      }
      const FileTimerExpiry expiry{pid, (*chosen)->scopeId, (*chosen)->signal,
                                   (*chosen)->expirationTime};
      // torch's clear_timers(reaped_worker_pids): every timer of the pid goes, due or not.
      timers_.erase(first, last);
      if (expired_) expired_(expiry);
    }
  } catch (...) {
    firing_ = false;
    rearm();
    throw;
  }
  firing_ = false;
  rearm();
}

FileTimerRefusals::FileTimerRefusals(EventLoop& loop, std::chrono::milliseconds window)
    : loop_(loop), window_(window) {}

void FileTimerRefusals::refused(const FileTimerExpiry& expiry) {
  ++total_;
  if (timer_) {
    ++counted_;
    if (std::find(countedPids_.begin(), countedPids_.end(), expiry.pid) == countedPids_.end()) {
      if (countedPids_.size() < kNamedPids) {
        countedPids_.push_back(expiry.pid);
      } else {
        morePids_ = true;
      }
    }
    return;
  }
  spdlog::warn(
      "ddprun: not sending {} to pid {}: FileTimer {} names a process that is neither a "
      "worker of this agent nor a descendant of one (torch's FileTimerServer would signal "
      "it); further refusals within {} s are counted",
      common::signalName(expiry.signal), expiry.pid, quotedValue(expiry.scopeId),
      std::chrono::duration_cast<std::chrono::seconds>(window_).count());
  timer_ = loop_.after(window_, [this] { windowEnded(); });
}

void FileTimerRefusals::windowEnded() {
  // The running Timer stays alive until this returns (as in FileTimers::fire).
  const std::unique_ptr<EventLoop::Timer> running = std::move(timer_);
  if (counted_ == 0) return;  // a quiet window: the next refusal is logged in full
  flush();
  timer_ = loop_.after(window_, [this] { windowEnded(); });
}

void FileTimerRefusals::flush() {
  if (counted_ == 0) return;
  std::string pids;
  for (pid_t pid : countedPids_) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
  if (morePids_) pids += ", ...";
  spdlog::warn(
      "ddprun: refused {} more FileTimer signal(s) to processes outside this agent's "
      "workers (pids {})",
      counted_, pids);
  counted_ = 0;
  countedPids_.clear();
  morePids_ = false;
}

}  // namespace ddprun::launcher
