// --stop-on-stdin-eof, the remote end of a launch over ssh (hosts/ssh_driver.h, docs/ssh.md):
// the driver holds this agent's stdin open for the whole job. A byte on it is a signal the
// driver got and passes on (SIGINT, SIGTERM, SIGHUP or SIGQUIT; any other byte reads as SIGTERM:
// ssh without a terminal passes no signal); EOF or an error means the driver or its ssh
// connection is gone, and the agent stops as on SIGTERM, so nothing is left running on this host.
#pragma once

#include <functional>
#include <memory>

#include <boost/asio/io_context.hpp>

namespace ddprun::launcher {

class StdinWatch {
 public:
  virtual ~StdinWatch() = default;
};

// Watches fd 0 on `io` and calls `onSignal` with each signal; the watch ends at EOF (after
// calling onSignal(SIGTERM)) or when the returned object is destroyed. Nothing when stdin cannot
// be watched (a regular file, say): the reason is logged.
std::unique_ptr<StdinWatch> watchStdin(boost::asio::io_context& io,
                                       std::function<void(int signal)> onSignal);

}  // namespace ddprun::launcher
