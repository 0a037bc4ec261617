#include "ddprun/rendezvous/job_secret.h"

#include <fmt/format.h>

#include "auth/private_file.h"

namespace ddprun::rendezvous {

JobSecret JobSecret::fromBytes(std::string bytes, const std::string& origin) {
  if (bytes.size() < kMinBytes) {
    throw TokenFileError(fmt::format(
        "{} holds {} bytes, fewer than the {} a token needs; write a long random one, e.g. "
        "`openssl rand -hex 32 > FILE && chmod 600 FILE`",
        origin, bytes.size(), kMinBytes));
  }
  return JobSecret(std::move(bytes));
}

JobSecret readTokenFile(const std::string& path) {
  // A token is short; anything large is not one (and must not be read whole into memory).
  constexpr std::size_t kMaxBytes = 64 * 1024;
  std::string bytes;
  try {
    bytes = auth::readPrivateFile(path, "token file", kMaxBytes);
  } catch (const auth::PrivateFileError& error) {
    throw TokenFileError(error.what());
  }
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                            bytes.back() == '\t')) {
    bytes.pop_back();
  }
  return JobSecret::fromBytes(std::move(bytes), fmt::format("the token file {}", path));
}

}  // namespace ddprun::rendezvous
