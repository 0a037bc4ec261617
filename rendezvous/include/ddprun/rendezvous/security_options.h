// The job's token and TLS files as a program takes them from a person: the rules of their
// combination, loading them, and how a store describes its security in the log. One copy for
// both programs that take them: the agents (`--rdzv-conf token_file=,tls_cert=,tls_key=,tls_ca=`)
// and ddprun-rendezvous (`--token-file`, `--tls-cert`, `--tls-key`). docs/security.md.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ddprun/rendezvous/job_secret.h"
#include "ddprun/rendezvous/tls.h"

namespace ddprun::rendezvous {

// How a program spells its security options, so that every line below names the caller's own
// options and the fix in its terms. Each option is written as a message writes it, with its
// placeholder ("token_file=PATH", "--token-file FILE"). A CA option (the agents' tls_ca) is named
// by no rule: what needs it is a client, and each of these programs may serve a store.
struct SecurityOptionNames {
  std::string_view tokenFile;
  std::string_view tlsCert;
  std::string_view tlsKey;
  // Who is given these options ("every agent"); empty where the line is about the one program.
  std::string_view holder;
  // Why the holder needs the certificate and the key together.
  std::string_view whyCertAndKey;
  // What a line that names the token option outside that option's own error puts in front of it
  // ("--rdzv-conf "), and who else must be given the same token ("; every agent takes ...").
  std::string_view within;
  std::string_view tokenAlsoFor;
};

// The agents: every agent may host the workers' store (group rank 0 of a round), so each needs
// the certificate and the key, not only what a client checks the store by.
inline constexpr SecurityOptionNames kAgentSecurityOptions{
    .tokenFile = "token_file=PATH",
    .tlsCert = "tls_cert=PATH",
    .tlsKey = "tls_key=PATH",
    .holder = "every agent",
    .whyCertAndKey = "any agent may host the workers' store",
    .within = "--rdzv-conf ",
    .tokenAlsoFor = "",
};

// ddprun-rendezvous: a store, never a client of one, so it has no CA option (--tls-ca).
inline constexpr SecurityOptionNames kDaemonSecurityOptions{
    .tokenFile = "--token-file FILE",
    .tlsCert = "--tls-cert FILE",
    .tlsKey = "--tls-key FILE",
    .holder = "",
    .whyCertAndKey = "the store presents the certificate and proves it with the key",
    .within = "",
    .tokenAlsoFor = "; every agent takes the same file as --rdzv-conf token_file=PATH",
};

// The files as given; an empty path is an option not given.
struct JobSecurityFiles {
  std::string tokenFile;
  TlsFiles tls;

  bool anyTls() const {
    return !tls.certificate.empty() || !tls.privateKey.empty() || !tls.authority.empty();
  }
};

// What is wrong with the combination, in one line naming the fix in `names`' spelling, or nothing:
// TLS needs the token (TLS hides the bytes; the token is what keeps strangers out, and the
// workers' relay needs it), and the certificate and its key go together (every holder may host
// a store). Reads no file: a program checks this as it parses its arguments.
std::optional<std::string> securityOptionsProblem(const JobSecurityFiles& files,
                                                  const SecurityOptionNames& names);

// The job's secret and TLS contexts, loaded together. Without a token file both are empty: the
// store is open, as torch's.
struct JobSecurity {
  std::optional<JobSecret> secret;
  std::shared_ptr<const TlsConfig> tls;  // null: no TLS
};

// The files cannot be used: what() is one line naming the file (or the options), what is wrong
// and the fix. code() says which part, for a caller that puts its own option in front.
class JobSecurityError : public std::runtime_error {
 public:
  enum class Code {
    kCombination,  // securityOptionsProblem(): no file was read
    kTokenFile,    // the token file (TokenFileError's message)
    kTlsFiles,     // a TLS file (TlsError's message)
  };
  JobSecurityError(const std::string& message, Code code)
      : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// Checks the combination (securityOptionsProblem), then reads the token file and the TLS files.
// Throws JobSecurityError.
JobSecurity loadJobSecurity(const JobSecurityFiles& files, const SecurityOptionNames& names);

// What a store that uses `security` adds to its "listening"/"hosting" line:
// "; TLS, and clients must prove the job's token", "; clients must prove the job's token" or "".
std::string_view storeSecurityNote(const JobSecurity& security);

// The warning for a store that listens without a token where other hosts reach it (`host` is not
// a loopback address, common::isLoopbackAddress), naming the fix in `names`' spelling; nothing
// when the store has a token or only this host reaches it. `store` names the store ("the
// rendezvous store"), `address` is where it listens as the line shows it.
std::optional<std::string> openStoreWarning(std::string_view store, const std::string& host,
                                            std::string_view address, const JobSecurity& security,
                                            const SecurityOptionNames& names);

}  // namespace ddprun::rendezvous
