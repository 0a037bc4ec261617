// The token handshake as pure logic (auth/handshake.h) and the token file's checks: both sides
// agree only on the same secret, a recorded exchange proves nothing later, and a secret that
// others can read never gets used.
#include "auth/handshake.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "temp_dir.h"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::auth;
using ddprun::test::writeFile;

namespace {

const JobSecret kSecret = JobSecret::fromBytes("correct horse battery staple");
const JobSecret kOther = JobSecret::fromBytes("another job's secret token");

Nonce filled(unsigned char byte) {
  Nonce nonce;
  nonce.fill(byte);
  return nonce;
}

}  // namespace

TEST_CASE("client and server with the same secret both prove it", "[handshake]") {
  const ClientHandshake client(kSecret);
  ServerHandshake server(kSecret);
  const std::string hello = client.hello();
  REQUIRE(hello.size() == kClientHelloBytes);
  REQUIRE(hello.starts_with(kMagic));
  const auto challenge = server.challenge(hello);
  REQUIRE(challenge);
  REQUIRE(challenge->size() == kServerChallengeBytes);
  std::string proof;
  REQUIRE(client.answer(*challenge, proof) == ClientHandshake::Verdict::kAccepted);
  REQUIRE(proof.size() == kClientProofBytes);
  CHECK(server.verify(proof));
  // The secret never travels.
  CHECK(hello.find(kSecret.bytes()) == std::string::npos);
  CHECK(challenge->find(kSecret.bytes()) == std::string::npos);
}

TEST_CASE("a server with another secret is recognised by the client", "[handshake]") {
  const ClientHandshake client(kSecret);
  ServerHandshake server(kOther);
  std::string proof;
  CHECK(client.answer(*server.challenge(client.hello()), proof) ==
        ClientHandshake::Verdict::kWrongSecret);
  CHECK(proof.empty());
}

TEST_CASE("a client with another secret is refused by the server", "[handshake]") {
  // The client's own check fails first in practice. One that answers anyway can only make proofs
  // under its own secret: the proof for this very hello and server nonce under the other secret.
  const ClientHandshake liar(kOther, filled(5));
  ServerHandshake server(kSecret, filled(9));
  REQUIRE(server.challenge(liar.hello()));
  ServerHandshake sameNonceOtherSecret(kOther, filled(9));
  std::string proof;
  REQUIRE(liar.answer(*sameNonceOtherSecret.challenge(liar.hello()), proof) ==
          ClientHandshake::Verdict::kAccepted);
  CHECK_FALSE(server.verify(proof));
  CHECK_FALSE(server.verify(std::string(kClientProofBytes, '\0')));
  CHECK_FALSE(server.verify(""));
}

TEST_CASE("a replayed client proof fails against a fresh server nonce", "[handshake]") {
  const ClientHandshake client(kSecret, filled(7));
  ServerHandshake first(kSecret, filled(1));
  std::string recorded;
  REQUIRE(client.answer(*first.challenge(client.hello()), recorded) ==
          ClientHandshake::Verdict::kAccepted);
  REQUIRE(first.verify(recorded));
  // The eavesdropper replays the same hello and the recorded proof on a new connection.
  ServerHandshake second(kSecret);  // a fresh random nonce, as every connection gets
  REQUIRE(second.challenge(client.hello()));
  CHECK_FALSE(second.verify(recorded));
}

TEST_CASE("the server's proof cannot be reflected as a client proof", "[handshake]") {
  // An attacker without the secret opens two connections and sends the server's challenge proof
  // of one as the client proof of the other: the labels differ, so it fails.
  ServerHandshake server(kSecret, filled(3));
  const ClientHandshake attacker(kSecret, filled(3));  // chooses client nonce == server nonce
  const auto challenge = server.challenge(attacker.hello());
  const std::string serverProof = challenge->substr(kMagic.size() + kNonceBytes);
  CHECK_FALSE(server.verify(serverProof));
}

TEST_CASE("anything but a hello is told apart at its first differing byte", "[handshake]") {
  CHECK(ServerHandshake::mayBeHello(""));
  CHECK(ServerHandshake::mayBeHello("ddp"));
  CHECK(ServerHandshake::mayBeHello(std::string(kMagic) + "anything"));
  CHECK_FALSE(ServerHandshake::mayBeHello(std::string("\x09\x3c\x6d\x5a", 4)));  // a torch VALIDATE
  CHECK_FALSE(ServerHandshake::mayBeHello("GET / HTTP/1.1"));
  ServerHandshake server(kSecret);
  CHECK_FALSE(server.challenge(std::string(kClientHelloBytes, 'x')));
  CHECK_FALSE(server.challenge(std::string(kMagic)));
  CHECK_FALSE(server.verify(std::string(kClientProofBytes, 'x')));  // no challenge was made
  const ClientHandshake client(kSecret);
  std::string proof;
  CHECK(client.answer("not a challenge", proof) == ClientHandshake::Verdict::kNotAChallenge);
  CHECK(client.answer(std::string(kServerChallengeBytes, 'x'), proof) ==
        ClientHandshake::Verdict::kNotAChallenge);
}

TEST_CASE("a token file: owner-only, long enough, trailing newline ignored", "[token-file]") {
  ddprun::test::TempDir dir;
  SECTION("mode 600 is read, without its trailing newline") {
    const auto path = writeFile(dir.file("token"), "0123456789abcdef0123\n", 0600);
    CHECK(readTokenFile(path).bytes() == "0123456789abcdef0123");
  }
  SECTION("readable by group or others: refused, naming chmod 600") {
    for (mode_t mode : {0644, 0640, 0604, 0660}) {
      const auto path = writeFile(dir.file("token"), "0123456789abcdef0123\n", mode);
      try {
        readTokenFile(path);
        FAIL("mode " << std::oct << mode << " was accepted");
      } catch (const TokenFileError& error) {
        CHECK_THAT(error.what(), Catch::Contains("chmod 600 " + path));
      }
    }
  }
  SECTION("too short") {
    const auto path = writeFile(dir.file("token"), "short\n", 0600);
    CHECK_THROWS_WITH(readTokenFile(path), Catch::Contains("fewer than the 16"));
  }
  SECTION("missing, or a directory") {
    CHECK_THROWS_AS(readTokenFile(dir.path + "/none"), TokenFileError);
    CHECK_THROWS_AS(readTokenFile(dir.path), TokenFileError);
  }
}
