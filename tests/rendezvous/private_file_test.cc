// The reader of the job's secrets (auth/private_file.h), behind readTokenFile and the TLS key, for
// the agent and ddprun-rendezvous alike: a FIFO at the path is refused at once (not waited on),
// a file another user owns is refused whatever its mode, a link to a good file is followed.
#include "auth/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "ddprun/rendezvous/job_secret.h"
#include "temp_dir.h"

using namespace ddprun::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

std::string writeToken(const std::string& path, mode_t mode = 0600) {
  return ddprun::test::writeFile(path, "0123456789abcdef0123\n", mode);
}

std::string refusal(const std::string& path) {
  try {
    readTokenFile(path);
  } catch (const TokenFileError& error) {
    return error.what();
  }
  FAIL("the token file " << path << " was accepted");
  return {};
}

}  // namespace

TEST_CASE("a FIFO at the token path is refused at once, naming the file and the fix",
          "[token-file]") {
  ddprun::test::TempDir dir;
  const std::string fifo = dir.path + "/token";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Should the reader block anyway, open the FIFO after 2 s so this fails instead of hanging.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!done && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done) return;
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (fd >= 0) ::close(fd);
  });
  const auto started = Clock::now();
  const std::string message = refusal(fifo);
  done = true;
  watchdog.join();
  CHECK(Clock::now() - started < std::chrono::seconds(1));
  CHECK_THAT(message, Catch::Contains(fifo) && Catch::Contains("is a FIFO, not a regular file") &&
                          Catch::Contains("give the path of a regular file (mode 600)"));
  CHECK(message.find('\n') == std::string::npos);
  // The TLS key goes through the same reader.
  CHECK_THROWS_WITH(auth::readPrivateFile(fifo, "TLS key", 1024), Catch::Contains("TLS key"));
}

TEST_CASE("a token file another user owns is refused whatever its mode", "[token-file]") {
  if (::geteuid() != 0) {
    WARN("skipped: giving a file to another user needs root");
    return;
  }
  ddprun::test::TempDir dir;
  const std::string path = writeToken(dir.path + "/token");
  REQUIRE(::chown(path.c_str(), 54321, 54321) == 0);
  const std::string message = refusal(path);
  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("belongs to uid 54321") &&
                          Catch::Contains("chown root " + path));
  // Root's own file is taken (a secret an administrator put in place).
  REQUIRE(::chown(path.c_str(), 0, 0) == 0);
  CHECK(readTokenFile(path).bytes() == "0123456789abcdef0123");
}

TEST_CASE("a link to a good token file is followed (a Kubernetes secret volume)", "[token-file]") {
  ddprun::test::TempDir dir;
  const std::string target = writeToken(dir.path + "/real-token");
  const std::string link = dir.path + "/token";
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  CHECK(readTokenFile(link).bytes() == "0123456789abcdef0123");
  // The mode checked is the file's, not the link's (0777).
  REQUIRE(::chmod(target.c_str(), 0644) == 0);
  CHECK_THAT(refusal(link), Catch::Contains("chmod 600"));
}
