// The aggregation of refusal log lines (refusal_tally.h), shared by the store server and the
// workers' relay, driven by a manual clock: the first refusal of each (source, reason) at once,
// then one count per window; a flood never hides another source's or reason's first line.
// Also the server's RefusalLog lines built on it (server/refusal_log.h).
#include "refusal_tally.h"

#include <catch2/catch.hpp>

#include "log_capture.h"
#include "server/refusal_log.h"

using namespace ddprun::rendezvous;
using namespace std::chrono_literals;
using ddprun::test::LogCapture;

namespace {

enum class Why : std::uint8_t { kA, kB };
using Tally = RefusalTally<int, Why>;

// A manual clock: time moves only when the test says so.
struct ManualClock {
  Tally::TimePoint now{};
  Tally::TimePoint advance(std::chrono::milliseconds by) { return now += by; }
};

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

}  // namespace

TEST_CASE("the first refusal of a source and reason is logged, the rest counted per window",
          "[refusal_tally]") {
  ManualClock clock;
  Tally tally(100ms, 16);
  CHECK(tally.count(7, Why::kA, clock.now));  // the first: logged at once
  for (int i = 0; i < 6011; ++i) CHECK_FALSE(tally.count(7, Why::kA, clock.advance(0ms)));
  CHECK(tally.due(clock.advance(99ms)).empty());  // the window is not over
  REQUIRE(tally.nextDue());
  CHECK(*tally.nextDue() == Tally::TimePoint{} + 100ms);

  const auto summaries = tally.due(clock.advance(1ms));
  REQUIRE(summaries.size() == 1);
  CHECK(summaries[0].source == 7);
  CHECK(summaries[0].reason == Why::kA);
  CHECK(summaries[0].count == 6012);  // every refusal of the window, the one logged included
  CHECK(summaries[0].over == 100ms);
  CHECK(tally.due(clock.now).empty());  // said once

  // The flood goes on: counted in the next window, still no line of its own.
  CHECK_FALSE(tally.count(7, Why::kA, clock.advance(10ms)));
  CHECK_FALSE(tally.count(7, Why::kA, clock.advance(10ms)));
  CHECK(tally.due(clock.advance(79ms)).empty());
  const auto next = tally.due(clock.advance(1ms));
  REQUIRE(next.size() == 1);
  CHECK(next[0].count == 2);

  // A quiet window: nothing to say, and the pair is forgotten; its next refusal is a first again.
  CHECK(tally.due(clock.advance(100ms)).empty());
  CHECK(tally.followed() == 0);
  CHECK_FALSE(tally.nextDue());
  CHECK(tally.count(7, Why::kA, clock.advance(1ms)));
}

TEST_CASE("a single refusal gets one line and no count", "[refusal_tally]") {
  ManualClock clock;
  Tally tally(100ms, 16);
  CHECK(tally.count(1, Why::kA, clock.now));
  CHECK(tally.due(clock.advance(100ms)).empty());
  CHECK(tally.followed() == 0);
}

TEST_CASE("a flood hides neither another source's nor another reason's first line",
          "[refusal_tally]") {
  ManualClock clock;
  Tally tally(60'000ms, 16);
  CHECK(tally.count(1001, Why::kA, clock.now));
  for (int i = 0; i < 5000; ++i) CHECK_FALSE(tally.count(1001, Why::kA, clock.advance(1ms)));
  CHECK(tally.count(1002, Why::kA, clock.advance(1ms)));  // another source, same reason
  CHECK(tally.count(1001, Why::kB, clock.advance(1ms)));  // same source, another reason
  CHECK_FALSE(tally.count(1002, Why::kA, clock.advance(1ms)));

  // Each pair's window ends 60 s after its own first line.
  auto summaries = tally.due(Tally::TimePoint{} + 60'000ms);
  REQUIRE(summaries.size() == 1);
  CHECK(summaries[0].source == 1001);
  CHECK(summaries[0].count == 5001);
  summaries = tally.due(Tally::TimePoint{} + 60'000ms + 5002ms);
  REQUIRE(summaries.size() == 1);  // 1002's pair; 1001/kB had a single refusal: no count
  CHECK(summaries[0].source == 1002);
  CHECK(summaries[0].count == 2);
}

TEST_CASE("the table stays bounded and never hides a refusal", "[refusal_tally]") {
  ManualClock clock;
  Tally tally(100ms, 3);
  // Three pairs with counts to report fill it.
  for (int source = 0; source < 3; ++source) {
    CHECK(tally.count(source, Why::kA, clock.now));
    CHECK_FALSE(tally.count(source, Why::kA, clock.now));
  }
  // A fourth is logged in full, every time, instead of followed.
  CHECK(tally.count(3, Why::kA, clock.advance(1ms)));
  CHECK(tally.count(3, Why::kA, clock.advance(1ms)));
  CHECK(tally.followed() == 3);
  // Pairs with nothing to report make room.
  const auto summaries = tally.due(clock.advance(100ms));
  CHECK(summaries.size() == 3);
  CHECK(tally.followed() == 3);  // their new windows, still empty
  CHECK(tally.count(3, Why::kA, clock.advance(1ms)));
  CHECK(tally.followed() == 1);
  CHECK_FALSE(tally.count(3, Why::kA, clock.advance(1ms)));  // now followed
}

TEST_CASE("what is left is reported at the end", "[refusal_tally]") {
  ManualClock clock;
  Tally tally(60'000ms, 16);
  CHECK(tally.count(5, Why::kB, clock.now));
  CHECK_FALSE(tally.count(5, Why::kB, clock.advance(250ms)));
  CHECK(tally.count(6, Why::kB, clock.now));
  const auto left = tally.remaining(clock.advance(250ms));
  REQUIRE(left.size() == 1);
  CHECK(left[0].source == 5);
  CHECK(left[0].count == 2);
  CHECK(left[0].over == 500ms);
  CHECK(tally.followed() == 0);
}

TEST_CASE("the summary line's wording", "[refusal_tally]") {
  CHECK(groupedCount(0) == "0");
  CHECK(groupedCount(999) == "999");
  CHECK(groupedCount(6012) == "6,012");
  CHECK(groupedCount(1234567) == "1,234,567");
  CHECK(refusalSummaryText("uid 1001", "not the agent's user", 6012, 60s) ==
        "refused 6,012 connections from uid 1001 in the last 60 s: not the agent's user");
  CHECK(refusalSummaryText("10.0.0.5", "presented a wrong token proof", 1, 250ms) ==
        "refused 1 connection from 10.0.0.5 in the last 250 ms: presented a wrong token proof");
}

TEST_CASE("the store server's refusal lines: per address and reason, then counted",
          "[refusal_tally][server]") {
  LogCapture log;
  RefusalLog refusals;
  const RefusalLog::Clock::time_point start{};
  refusals.report("10.0.0.5:40000", "10.0.0.5", Refusal::kNotHandshake, {}, start);
  for (int i = 1; i < 6012; ++i) {
    refusals.report("10.0.0.5:" + std::to_string(40000 + i % 20000), "10.0.0.5",
                    Refusal::kNotHandshake, {}, start + std::chrono::milliseconds(i));
  }
  refusals.report("10.0.0.6:40000", "10.0.0.6", Refusal::kNotHandshake, {}, start + 7s);
  refusals.report("10.0.0.5:40001", "10.0.0.5", Refusal::kHandshakeTimeout, "(10000 ms)",
                  start + 8s);
  std::string text = log.text();
  CHECK(occurrences(text, "refused a connection from") == 3);
  CHECK_THAT(text, Catch::Contains("refused a connection from 10.0.0.5:40000: its first bytes are "
                                   "not a token handshake"));
  CHECK_THAT(text, Catch::Contains("refused a connection from 10.0.0.6:40000"));
  CHECK_THAT(text, Catch::Contains("within the deadline (10000 ms)"));
  refusals.flush(start + 59s);
  CHECK(log.text() == text);  // no window has ended
  refusals.flush(start + 60s);
  text = log.text();
  CHECK_THAT(text, Catch::Contains("refused 6,012 connections from 10.0.0.5 in the last 60 s: its "
                                   "first bytes are not a token handshake"));
  CHECK(occurrences(text, "in the last") == 1);  // the others refused once each
}
