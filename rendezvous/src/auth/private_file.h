// Reading a file that holds a secret (the job's token, a TLS private key): it must be a regular
// file (checked without blocking: a FIFO is refused, not waited on), owned by this user or root,
// that only its owner can read or write, as ssh insists for its keys. One reader for the agent and
// ddprun-rendezvous (through loadJobSecurity), on common::openForReading.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddprun::rendezvous::auth {

// The file cannot be used; what() is one line naming the file, what is wrong and the fix. Callers
// rethrow it as their own error type (TokenFileError, TlsError).
class PrivateFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The bytes of `path`, checked as above. `what` names the file in messages ("token file"). A file
// over `maxBytes` is refused without being read whole. Throws PrivateFileError.
std::string readPrivateFile(const std::string& path, std::string_view what, std::size_t maxBytes);

}  // namespace ddprun::rendezvous::auth
