#include "ddprun/common/random_id.h"

#include <sys/random.h>

#include <cerrno>
#include <random>
#include <system_error>
#include <vector>

namespace ddprun::common {

namespace {

std::string hexOf(const unsigned char* bytes, std::size_t count) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    text += kHex[bytes[i] >> 4];
    text += kHex[bytes[i] & 0xf];
  }
  return text;
}

}  // namespace

std::string randomHexId() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    std::random_device device;
    for (auto& byte : bytes) byte = static_cast<unsigned char>(device());
  }
  return hexOf(bytes, sizeof bytes);
}

std::string randomHexSecret(std::size_t count) {
  std::vector<unsigned char> bytes(count);
  std::size_t filled = 0;
  while (filled < count) {
    const ssize_t n = ::getrandom(bytes.data() + filled, count - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    filled += static_cast<std::size_t>(n);
  }
  return hexOf(bytes.data(), count);
}

}  // namespace ddprun::common
