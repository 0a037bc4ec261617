// The job secrets the store tests use: one the stores and clients share, and another one, to tell
// a wrong token apart. Any 16 bytes or more would do.
#pragma once

#include "ddprun/rendezvous/job_secret.h"

namespace ddprun::test {

inline const rendezvous::JobSecret kSecret =
    rendezvous::JobSecret::fromBytes("0123456789abcdef-the-job-secret");
inline const rendezvous::JobSecret kOther =
    rendezvous::JobSecret::fromBytes("0123456789abcdef-another-secret");

}  // namespace ddprun::test
