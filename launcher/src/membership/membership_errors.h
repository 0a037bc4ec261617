// What Membership's calls throw, by kind: the caller decides on the type, never on the text.
#pragma once

#include <stdexcept>
#include <string>

namespace ddprun::launcher {

// Joining failed for good: the message says why (timeout, too few nodes, closed job).
class MembershipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The job cannot start because of what the user gave (exit 2): the message names the fix.
class BadInputError : public MembershipError {
 public:
  using MembershipError::MembershipError;
};

// The rendezvous endpoint never answered within read_timeout, its host name never resolved within
// the join timeout, or something that is not a ddprun store answers there: the endpoint given is
// wrong or its host is not up.
class EndpointError : public BadInputError {
 public:
  using BadInputError::BadInputError;
};

// The store stopped answering this agent: its host closed the connection (the agent hosting it
// exited, the daemon stopped) or it went silent (the network to it is cut, its host is down).
class StoreLostError : public MembershipError {
 public:
  explicit StoreLostError(const std::string& message, bool closedByHost = false)
      : MembershipError(message), closedByHost_(closedByHost) {}
  // The store's side ended the connection (or refused a new one): an answer, not silence.
  bool closedByHost() const { return closedByHost_; }

 private:
  bool closedByHost_;
};

// The job this agent waited to take part in finished without it (it was full): nothing to do.
class JobOverError : public MembershipError {
 public:
  using MembershipError::MembershipError;
};

// A blocking call gave up because cancel() was called (the agent is shutting down).
class MembershipCancelled : public std::runtime_error {
 public:
  MembershipCancelled() : std::runtime_error("cancelled") {}
};

}  // namespace ddprun::launcher
