#include "ddprun/rendezvous/security_options.h"

#include <fmt/format.h>

#include "ddprun/common/local_address.h"

namespace ddprun::rendezvous {

std::optional<std::string> securityOptionsProblem(const JobSecurityFiles& files,
                                                  const SecurityOptionNames& names) {
  // A CA option the program does not have cannot have been given; the others count alike.
  if (!files.anyTls()) return std::nullopt;
  // TLS hides the bytes; the token is what keeps strangers out, and the workers' relay needs it.
  if (files.tokenFile.empty()) {
    return fmt::format("TLS needs the job's token too; add {}", names.tokenFile);
  }
  // A client alone could do with the certificate or the CA, but every program that takes these
  // options may serve a store (any agent may host the workers' store; the daemon is one).
  if (files.tls.certificate.empty() || files.tls.privateKey.empty()) {
    return fmt::format("give {}{}both {} and {} ({})", names.holder,
                       names.holder.empty() ? "" : " ", names.tlsCert, names.tlsKey,
                       names.whyCertAndKey);
  }
  return std::nullopt;
}

JobSecurity loadJobSecurity(const JobSecurityFiles& files, const SecurityOptionNames& names) {
  if (auto problem = securityOptionsProblem(files, names)) {
    throw JobSecurityError(*problem, JobSecurityError::Code::kCombination);
  }
  JobSecurity security;
  if (files.tokenFile.empty()) return security;
  try {
    security.secret = readTokenFile(files.tokenFile);
  } catch (const TokenFileError& error) {
    throw JobSecurityError(error.what(), JobSecurityError::Code::kTokenFile);
  }
  if (!files.anyTls()) return security;
  try {
    security.tls = TlsConfig::load(files.tls);
  } catch (const TlsError& error) {
    throw JobSecurityError(error.what(), JobSecurityError::Code::kTlsFiles);
  }
  return security;
}

std::string_view storeSecurityNote(const JobSecurity& security) {
  if (security.tls) return "; TLS, and clients must prove the job's token";
  if (security.secret) return "; clients must prove the job's token";
  return "";
}

std::optional<std::string> openStoreWarning(std::string_view store, const std::string& host,
                                            std::string_view address, const JobSecurity& security,
                                            const SecurityOptionNames& names) {
  if (security.secret || common::isLoopbackAddress(host)) return std::nullopt;
  return fmt::format(
      "{} listens on {} without a token: anyone who reaches it can read and change "
      "the job's rendezvous; give {}{}{}{} (a mode-600 file with the job's secret{}) "
      "on a network you do not trust",
      store, address, names.holder, names.holder.empty() ? "" : " ", names.within, names.tokenFile,
      names.tokenAlsoFor);
}

}  // namespace ddprun::rendezvous
