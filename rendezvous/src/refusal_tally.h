// RefusalTally: which refused connections get a log line, for the store server's refusals (per
// peer address and reason, server/refusal_log.h) and the workers' relay's (per local user and
// reason, relay/). The first refusal of a (source, reason) is logged at once, in full; later ones
// are counted, and each window that counted some ends in one line with the count ("refused 6,012
// connections from uid 1001 in the last 60 s: not the agent's user"). So a flood costs one line
// per window and stays visible, and it never hides another source's or another reason's first
// line, as one line per source would (a local user's noise hiding another's attempts).
//
// Time comes in from the caller (`now`), so the unit test drives it with a manual clock. Lives on
// one thread (the server's or the relay's event loop).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::rendezvous {

template <typename Source, typename Reason>
class RefusalTally {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // One line's worth: `count` refusals of `source` for `reason` in the `over` that ended now.
  struct Summary {
    Source source;
    Reason reason;
    std::uint64_t count = 0;
    Clock::duration over{};
  };

  // `window`: how long refusals are counted before their line; `maxEntries`: the (source,
  // reason) pairs followed at most (memory stays bounded whatever the sources).
  RefusalTally(Clock::duration window, std::size_t maxEntries)
      : window_(window), maxEntries_(maxEntries) {}

  // Counts one refusal at `now`. True when the caller logs it now, in full: the first of its
  // (source, reason) since that pair was last quiet for a window. Also true, for every refusal,
  // of a new pair that finds the table full of pairs with counts to report: it is logged instead
  // of followed, so the bound on memory never hides a refusal.
  bool count(const Source& source, Reason reason, TimePoint now) {
    const Key key{source, reason};
    if (auto found = entries_.find(key); found != entries_.end()) {
      ++found->second.count;
      ++found->second.unlogged;
      return false;
    }
    if (entries_.size() >= maxEntries_) {
      // Pairs with nothing to report can go: forgetting one costs at most a repeated first line.
      std::erase_if(entries_, [](const auto& entry) { return entry.second.unlogged == 0; });
      if (entries_.size() >= maxEntries_) return true;
    }
    entries_.emplace(key, Entry{now, 1, 0});
    if (!nextDue_ || now + window_ < *nextDue_) nextDue_ = now + window_;
    return true;
  }

  // The pairs whose window has ended by `now` with refusals not yet logged, one summary each
  // (its count: every refusal of the window, the one logged in full included); their next
  // window starts now. A pair whose window ended with none is forgotten: its next refusal is
  // logged at once again.
  std::vector<Summary> due(TimePoint now) {
    std::vector<Summary> summaries;
    if (!nextDue_ || now < *nextDue_) return summaries;
    nextDue_.reset();
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& entry = it->second;
      if (now - entry.windowStart < window_) {
        noteDue(entry.windowStart + window_);
        ++it;
      } else if (entry.unlogged == 0) {
        it = entries_.erase(it);
      } else {
        summaries.push_back(
            Summary{it->first.first, it->first.second, entry.count, now - entry.windowStart});
        entry = Entry{now, 0, 0};
        noteDue(now + window_);
        ++it;
      }
    }
    return summaries;
  }

  // Every count not yet logged, whatever its window (when the server or the relay stops).
  std::vector<Summary> remaining(TimePoint now) {
    std::vector<Summary> summaries;
    for (const auto& [key, entry] : entries_) {
      if (entry.unlogged > 0) {
        summaries.push_back(Summary{key.first, key.second, entry.count, now - entry.windowStart});
      }
    }
    entries_.clear();
    nextDue_.reset();
    return summaries;
  }

  // When due() next has a window to close; nothing when no pair is followed.
  std::optional<TimePoint> nextDue() const { return nextDue_; }
  std::size_t followed() const { return entries_.size(); }
  Clock::duration window() const { return window_; }

 private:
  using Key = std::pair<Source, Reason>;
  struct Entry {
    TimePoint windowStart;
    std::uint64_t count = 0;     // refusals in this window
    std::uint64_t unlogged = 0;  // of them, those no line has shown yet
  };

  void noteDue(TimePoint at) {
    if (!nextDue_ || at < *nextDue_) nextDue_ = at;
  }

  Clock::duration window_;
  std::size_t maxEntries_;
  std::map<Key, Entry> entries_;
  std::optional<TimePoint> nextDue_;  // the earliest window end among entries_
};

// The summary line's text after its prefix: "refused 6,012 connections from SOURCE in the last
// 60 s: REASON" (milliseconds under a second). One wording for the server and the relay.
std::string refusalSummaryText(std::string_view source, std::string_view reason,
                               std::uint64_t count, std::chrono::steady_clock::duration over);

// `count` with a comma every three digits ("6,012"): counts in log lines are read by people.
std::string groupedCount(std::uint64_t count);

}  // namespace ddprun::rendezvous
