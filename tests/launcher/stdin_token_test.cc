// --token-from-stdin (agent/stdin_reader.h): the job's token as the ssh driver hands it to a remote
// agent, the first line on its stdin. Checked on real pipes: the line is taken and nothing after
// it (the driver's signal bytes stay for the signal reader), and each way it can be wrong is one
// line.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "agent/startup_error.h"
#include "agent/stdin_reader.h"

namespace {

using namespace ddprun::launcher;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

// A pipe holding `bytes`; its write end closed when `close` says so.
struct Pipe {
  int read = -1;
  int write = -1;
  Pipe(const std::string& bytes, bool close) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read = fds[0];
    write = fds[1];
    REQUIRE(::write(write, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    if (close) closeWrite();
  }
  void closeWrite() {
    if (write >= 0) ::close(write);
    write = -1;
  }
  ~Pipe() {
    ::close(read);
    closeWrite();
  }
};

std::string refusal(const std::string& bytes, bool close, std::chrono::milliseconds limit = 2s) {
  const Pipe pipe(bytes, close);
  try {
    readTokenLine(pipe.read, limit);
  } catch (const StartupError& error) {
    const std::string message = error.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK_THAT(message, Contains("--rdzv-conf token_file=PATH"));  // the fix outside --hosts
    return message;
  }
  FAIL("the token line was taken");
  return {};
}

}  // namespace

TEST_CASE("the token line is taken up to its newline, and the signal bytes after it stay") {
  const std::string token(64, 'a');
  const Pipe pipe(token + "\r\n\x0f", false);
  CHECK(readTokenLine(pipe.read, 2s).bytes() == token);
  unsigned char next = 0;
  REQUIRE(::read(pipe.read, &next, 1) == 1);
  CHECK(next == 15);  // SIGTERM's byte, for readStdinSignals
}

TEST_CASE("a token line that cannot be used is one line naming why") {
  CHECK_THAT(refusal("short\n", true), Contains("fewer than the 16"));
  CHECK_THAT(refusal(std::string(2000, 'x'), false), Contains("longer than 1024 bytes"));
  CHECK_THAT(refusal(std::string(64, 'a'), true), Contains("stdin ended before the token line"));
  CHECK_THAT(refusal("", true), Contains("stdin ended before the token line"));
  const auto started = std::chrono::steady_clock::now();
  CHECK_THAT(refusal(std::string(64, 'a'), false, 200ms),
             Contains("no token line on stdin within 0.2 s"));
  CHECK(std::chrono::steady_clock::now() - started < 2s);
}
