// RawClient: a bare TCP connection for tests that speak the wire protocol byte by byte, so they
// can assert the exact bytes a server returns and send frames no well-behaved client would.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::test {

using namespace std::chrono_literals;

// "00 03000000 00000000 2f6b31" -> those bytes (spaces ignored).
std::string hex(std::string_view text);
// Bytes -> lowercase hex without spaces, for readable assertion failures.
std::string toHex(std::string_view bytes);
// Wire fields: a little-endian uint64, and a blob (length, then the bytes).
std::string u64(std::uint64_t v);
std::string blob(std::string_view bytes);

class RawClient {
 public:
  // From `source` when given (another loopback address, say, to be another client address).
  RawClient(const std::string& host, std::uint16_t port, const std::string& source = "");
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(std::string_view bytes);
  void sendHex(std::string_view hexText) { send(hex(hexText)); }
  // Exactly `n` bytes, or nothing if they do not arrive within `timeout` or the peer closes.
  std::optional<std::string> receive(std::size_t n, std::chrono::milliseconds timeout = 5s);
  // True if nothing at all arrives within `timeout` (the connection stays open and silent).
  bool silentFor(std::chrono::milliseconds timeout);
  // True if the server closes the connection (EOF or reset) within `timeout`.
  bool closedWithin(std::chrono::milliseconds timeout);
  // Sends the 2.x handshake: VALIDATE and a PING whose echo is checked.
  void handshake2x();
  // This end's port, as the server sees it in "127.0.0.1:<port>".
  std::uint16_t localPort() const;

 private:
  int fd_;
};

}  // namespace ddprun::test
