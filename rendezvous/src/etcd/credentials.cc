// readEtcdCredentials: a password from a file, through the one reader of secret files.
#include "auth/private_file.h"
#include "ddprun/common/text.h"
#include "ddprun/rendezvous/etcd_client.h"

namespace ddprun::rendezvous::etcd {

EtcdCredentials readEtcdCredentials(std::string user, const std::string& passwordFile) {
  std::string password;
  try {
    password = auth::readPrivateFile(passwordFile, "etcd password file", kMaxPasswordFileBytes);
  } catch (const auth::PrivateFileError& error) {
    throw EtcdError(EtcdError::Code::kRejected, error.what());
  }
  // `echo secret > file` and editors end the file with a line end, which is not part of the
  // password (etcdctl's --password takes none either).
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) {
    password.pop_back();
  }
  const std::string shownPath = common::printablePrefix(passwordFile);
  if (password.empty()) {
    throw EtcdError(EtcdError::Code::kRejected,
                    "the etcd password file " + shownPath +
                        " is empty; write the password of the etcd user into it");
  }
  // The password travels in JSON, which must be UTF-8: said now, naming the file, rather than
  // at the first call.
  if (common::validUtf8(password) != password) {
    throw EtcdError(EtcdError::Code::kRejected,
                    "the etcd password file " + shownPath +
                        " is not UTF-8 text; etcd takes only UTF-8 passwords");
  }
  return {std::move(user), std::move(password)};
}

}  // namespace ddprun::rendezvous::etcd
