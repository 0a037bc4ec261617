// Which connections the workers' relay serves, as a pure function of what the kernel says of the
// socket that opened them (relay/peer_user.h, issue #18): every TCP state × inode × uid × the
// agent's uid, and the answers that are no socket at all.
#include <catch2/catch.hpp>

#include "relay/peer_user.h"

using namespace ddprun::rendezvous;

namespace {

constexpr uid_t kAgent = 1000;
constexpr uid_t kOther = 1001;
constexpr uid_t kRoot = 0;

PeerLookup found(TcpState state, std::uint64_t inode, uid_t uid) {
  PeerLookup lookup;
  lookup.outcome = PeerLookup::Outcome::kFound;
  lookup.socket = PeerSocket{state, inode, uid};
  return lookup;
}

PeerLookup outcome(PeerLookup::Outcome kind, int error) {
  PeerLookup lookup;
  lookup.outcome = kind;
  lookup.error = error;
  return lookup;
}

const TcpState kAllStates[] = {TcpState::kEstablished, TcpState::kSynSent,   TcpState::kSynRecv,
                               TcpState::kFinWait1,    TcpState::kFinWait2,  TcpState::kTimeWait,
                               TcpState::kClose,       TcpState::kCloseWait, TcpState::kLastAck,
                               TcpState::kListen,      TcpState::kClosing,   TcpState::kNewSynRecv};

bool live(TcpState state) {
  return state == TcpState::kEstablished || state == TcpState::kFinWait1 ||
         state == TcpState::kFinWait2;
}

}  // namespace

TEST_CASE("a live socket of the agent's user is served", "[relay][admission]") {
  const PeerAdmission admission = admitPeer(found(TcpState::kEstablished, 4242, kAgent), kAgent);
  CHECK(admission.verdict == PeerVerdict::kAdmit);
  CHECK(admission.owner == kAgent);
  // A client that sent its request and shut its sending side, still holding the socket.
  CHECK(admitPeer(found(TcpState::kFinWait1, 4242, kAgent), kAgent).verdict == PeerVerdict::kAdmit);
  CHECK(admitPeer(found(TcpState::kFinWait2, 4242, kAgent), kAgent).verdict == PeerVerdict::kAdmit);
}

TEST_CASE("the mini-sockets of issue #18 are refused as gone, whatever uid they report",
          "[relay][admission]") {
  // What sock_diag says of a peer that closed while its connection waited in the accept queue.
  for (const uid_t agent : {kAgent, kRoot}) {
    for (const TcpState state : {TcpState::kTimeWait, TcpState::kFinWait2}) {
      const PeerAdmission admission = admitPeer(found(state, 0, kRoot), agent);
      CHECK(admission.verdict == PeerVerdict::kGone);
      CHECK(!admission.owner);  // uid 0 of a mini-socket names nobody
    }
  }
}

TEST_CASE("every state × inode × uid × agent: only live, held sockets of the agent's user pass",
          "[relay][admission]") {
  for (const uid_t agent : {kAgent, kRoot}) {
    for (const TcpState state : kAllStates) {
      for (const std::uint64_t inode : {std::uint64_t{0}, std::uint64_t{77}}) {
        for (const uid_t uid : {kAgent, kOther, kRoot}) {
          CAPTURE(agent, static_cast<int>(state), inode, uid);
          const PeerAdmission admission = admitPeer(found(state, inode, uid), agent);
          PeerVerdict expected = PeerVerdict::kAdmit;
          if (inode == 0 || !live(state)) {
            expected = PeerVerdict::kGone;
          } else if (uid != agent) {
            expected = PeerVerdict::kOtherUser;
          }
          CHECK(admission.verdict == expected);
          // The owner is named only where a process holds the socket (its uid is real).
          CHECK(admission.owner.has_value() == (inode != 0));
          if (admission.owner) CHECK(*admission.owner == uid);
        }
      }
    }
  }
}

TEST_CASE("root is served only when root is the agent's user", "[relay][admission]") {
  CHECK(admitPeer(found(TcpState::kEstablished, 9, kRoot), kAgent).verdict ==
        PeerVerdict::kOtherUser);
  CHECK(admitPeer(found(TcpState::kEstablished, 9, kRoot), kRoot).verdict == PeerVerdict::kAdmit);
  CHECK(admitPeer(found(TcpState::kEstablished, 9, kAgent), kRoot).verdict ==
        PeerVerdict::kOtherUser);
}

TEST_CASE("answers that are no socket: gone, cannot tell, failed", "[relay][admission]") {
  for (const uid_t agent : {kAgent, kRoot}) {
    // The kernel knows no such socket: the peer is gone.
    CHECK(admitPeer(outcome(PeerLookup::Outcome::kNoSuchSocket, ENOENT), agent).verdict ==
          PeerVerdict::kGone);
    // A kernel without socket diagnostics: served unchecked (the relay warns once).
    CHECK(admitPeer(outcome(PeerLookup::Outcome::kNoDiagnostics, EPROTONOSUPPORT), agent).verdict ==
          PeerVerdict::kAdmitUnchecked);
    // Any other failure (out of descriptors, memory): refused, fail closed.
    for (const int error : {EMFILE, ENFILE, ENOBUFS, ENOMEM, EAGAIN, EPERM}) {
      CAPTURE(error);
      const PeerAdmission admission =
          admitPeer(outcome(PeerLookup::Outcome::kFailed, error), agent);
      CHECK(admission.verdict == PeerVerdict::kLookupFailed);
      CHECK(!admission.owner);
    }
  }
}

TEST_CASE("a state the kernel may add later is not live", "[relay][admission]") {
  const auto unknown = static_cast<TcpState>(200);
  CHECK(admitPeer(found(unknown, 5, kAgent), kAgent).verdict == PeerVerdict::kGone);
  CHECK(tcpStateName(unknown) == "an unknown state");
  CHECK(tcpStateName(TcpState::kTimeWait) == "TIME_WAIT");
}
