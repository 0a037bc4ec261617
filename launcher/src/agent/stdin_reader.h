// --stop-on-stdin-eof, the remote end of a launch over ssh (hosts/ssh_driver.h, docs/ssh.md):
// the driver holds this agent's stdin open for the whole job. A byte on it is a signal the
// driver got and passes on (SIGINT, SIGTERM, SIGHUP or SIGQUIT; any other byte reads as SIGTERM:
// ssh without a terminal passes no signal); EOF or an error means the driver or its ssh
// connection is gone, and the agent stops as on SIGTERM, so nothing is left running on this host.
//
// --token-from-stdin: before the signals, the driver's first line on that stdin is the job's token.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "ddprun/rendezvous/job_secret.h"

namespace ddprun::launcher {

// The longest token line taken from stdin, its newline included; a longer one is refused.
inline constexpr std::size_t kLongestTokenLine = 1024;

// Reads the job's token from `fd`: one line of at most kLongestTokenLine bytes, ended by a
// newline (trailing blanks and '\r' dropped), within `limit`. Reads byte by byte, so that what
// follows the line (the driver's signal bytes) stays for readStdinSignals. Throws StartupError, one
// line naming what is wrong: stdin ended or failed first, the line is too long, late or too
// short for a token (rendezvous::JobSecret::kMinBytes).
rendezvous::JobSecret readTokenLine(int fd, std::chrono::milliseconds limit);

class StdinReader {
 public:
  virtual ~StdinReader() = default;
};

// Reads fd 0 on `io` and calls `onSignal` with each signal; the reading ends at EOF (after
// calling onSignal(SIGTERM)) or when the returned object is destroyed. Nothing when stdin cannot
// be read this way (a regular file, say): the reason is logged.
std::unique_ptr<StdinReader> readStdinSignals(boost::asio::io_context& io,
                                              std::function<void(int signal)> onSignal);

}  // namespace ddprun::launcher
