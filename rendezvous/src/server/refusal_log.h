// RefusalLog: the log lines of the connections a store refuses in the token or the TLS handshake.
// Counted per peer address and reason (refusal_tally.h): the first refusal of an (address,
// reason) is logged at once, with the peer's port and the detail; later ones are counted and
// summed up in one line per window. A scanner or a misconfigured job retrying thousands of times
// costs a line a minute (and the loop no time formatting lines), and never hides the first line
// of another address, or of another reason from the same one.
//
// Lives on the server's event-loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "refusal_tally.h"

namespace ddprun::rendezvous {

// Why a connection was refused before it was served: what the log names and counts by.
enum class Refusal : std::uint8_t {
  kSilent,         // disconnected before sending anything
  kLeftHandshake,  // disconnected in the middle of the token handshake
  kNotHandshake,   // its first bytes are not a token hello (torch's client, a scanner)
  kMalformedHello,
  kLeftAfterChallenge,  // a client with another token, or a ddprun client asking
  kWrongProof,
  kHandshakeTimeout,  // did not finish the token handshake within the deadline
  kLeftTlsHandshake,  // disconnected in the TLS handshake
  kNotTls,            // did not complete a TLS handshake (a client without TLS)
  kTlsTimeout,        // did not finish the TLS handshake within the deadline
  kNoSocketPair,      // this server could not make the TLS connection's socket pair
  kEvicted,           // still in the handshake when newer connections filled the pending slots
};

// What the line says of `reason`: fixed text (a number or an errno goes in report's `detail`).
std::string_view describe(Refusal reason);

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;

  // A refusal of `peer` (address and port) whose IP is `peerAddress`, at `now`: logged at once if
  // it is the first of its (address, reason), with `detail` (text of this server's, never the
  // peer's bytes: a deadline, an errno); counted otherwise.
  void report(const std::string& peer, const std::string& peerAddress, Refusal reason,
              std::string_view detail = {}, Clock::time_point now = Clock::now());
  // Logs the counts of the windows that have ended by `now` (the server's sweep calls it; cheap
  // when none has).
  void flush(Clock::time_point now);
  // Logs every count not yet logged (the server is stopping).
  void flushAll(Clock::time_point now);

  // One line per address and reason per this window.
  static constexpr std::chrono::seconds kWindow{60};
  // (address, reason) pairs followed at most: a flood from many addresses must not grow the table
  // without bound (beyond it, refusals are logged each, never hidden).
  static constexpr std::size_t kMaxFollowed = 4096;

 private:
  using Tally = RefusalTally<std::string, Refusal>;
  static void logCounts(const std::vector<Tally::Summary>& summaries);

  Tally tally_{kWindow, kMaxFollowed};
};

}  // namespace ddprun::rendezvous
