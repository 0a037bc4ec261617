#include "server/refusal_log.h"

#include <spdlog/spdlog.h>

namespace ddprun::rendezvous {

std::string_view describe(Refusal reason) {
  switch (reason) {
    case Refusal::kSilent:
      return "disconnected before sending anything";
    case Refusal::kLeftHandshake:
      return "disconnected in the middle of the token handshake";
    case Refusal::kNotHandshake:
      return "its first bytes are not a token handshake (a client without the job's token)";
    case Refusal::kMalformedHello:
      return "sent a malformed token hello";
    case Refusal::kLeftAfterChallenge:
      return "left the token handshake after the challenge (a client with another token, or one "
             "without a token finding out that this store wants one)";
    case Refusal::kWrongProof:
      return "presented a wrong token proof";
    case Refusal::kHandshakeTimeout:
      return "did not finish the token handshake within the deadline";
    case Refusal::kLeftTlsHandshake:
      return "disconnected in the TLS handshake";
    case Refusal::kNotTls:
      return "did not complete a TLS handshake (a client without TLS)";
    case Refusal::kTlsTimeout:
      return "did not finish the TLS handshake within the deadline";
    case Refusal::kNoSocketPair:
      return "this server could not make a socket pair for its TLS connection";
    case Refusal::kEvicted:
      return "was still in the handshake when the pending-handshake slots were all taken by newer "
             "connections";
  }
  return "refused";
}

void RefusalLog::report(const std::string& peer, const std::string& peerAddress, Refusal reason,
                        std::string_view detail, Clock::time_point now) {
  if (!tally_.count(peerAddress, reason, now)) return;
  spdlog::warn(
      "refused a connection from {}: {}{}{}; more of these from {} are counted and logged "
      "once per {} s",
      peer, describe(reason), detail.empty() ? "" : " ", detail, peerAddress, kWindow.count());
}

void RefusalLog::flush(Clock::time_point now) { logCounts(tally_.due(now)); }

void RefusalLog::flushAll(Clock::time_point now) { logCounts(tally_.remaining(now)); }

void RefusalLog::logCounts(const std::vector<Tally::Summary>& summaries) {
  for (const auto& summary : summaries) {
    spdlog::warn("{}", refusalSummaryText(summary.source, describe(summary.reason), summary.count,
                                          summary.over));
  }
}

}  // namespace ddprun::rendezvous
