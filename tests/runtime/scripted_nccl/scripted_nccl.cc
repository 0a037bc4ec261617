// A scripted NCCL (libnccl's soname, see scripted.h). It keeps the rules a non-blocking
// communicator sets its user -- poll ncclCommGetAsyncError until a call is no longer
// ncclInProgress before the next one, pass device memory, on the communicator's device -- and
// logs a line starting "BUG" where the runtime breaks one. The script decides whether the
// communicator comes up, which collective hangs or fails, and whether finalizing hangs.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "scripted.h"

namespace {

struct Script {
  std::string scenario = "ok";
  int at = 0;  // the collective (from 1) that hangs or fails
};

// The script plays in a job's first attempt only, so that the group the agent restarts runs clean.
Script readScript() {
  Script script;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != nullptr && std::strcmp(restarts, "0") != 0) return script;
  const char* text = std::getenv("DDPRUN_SCRIPTED_NCCL");
  if (text == nullptr || *text == '\0') return script;
  script.scenario = text;
  if (const auto colon = script.scenario.find(':'); colon != std::string::npos) {
    script.at = std::atoi(script.scenario.c_str() + colon + 1);
    script.scenario.resize(colon);
  }
  return script;
}

std::size_t sizeOf(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace

// The definition behind ncclComm_t.
struct ncclComm {
  int rank = 0;
  int ranks = 1;
  int device = 0;
  Script script;
  int pendingPolls = 0;  // ncclCommGetAsyncError answers ncclInProgress this many times more
  // What the last call does once it stops being ncclInProgress: until then, as with real NCCL, it
  // is not on the stream yet (the stream looks idle) and its data has not moved.
  std::function<void()> pendingWork;
  bool neverDone = false;  // ... or for ever (a peer that never joins; a finalize that hangs)
  int errorCountdown = 0;  // polls until the scripted asynchronous error appears
  ncclResult_t asyncError = ncclSuccess;
  std::string lastError;
  int collectives = 0;
};

namespace {

// The checks every collective passes before it is enqueued; a broken rule is logged as a BUG
// and answered as real NCCL would (an error return).
ncclResult_t admit(ncclComm* comm, const char* what, const void* send, std::size_t sendBytes,
                   const void* receive, std::size_t receiveBytes) {
  if (comm->asyncError != ncclSuccess) return comm->asyncError;
  if (comm->pendingPolls > 0 || comm->neverDone) {
    scriptedLog("BUG rank=%d %s issued while the communicator is still ncclInProgress", comm->rank,
                what);
    return ncclInvalidUsage;
  }
  if (!scriptedIsDeviceMemory(send, sendBytes) || !scriptedIsDeviceMemory(receive, receiveBytes)) {
    scriptedLog("BUG rank=%d %s given a buffer that is not device memory", comm->rank, what);
    return ncclInvalidArgument;
  }
  if (scriptedCurrentDevice() != comm->device) {
    scriptedLog("BUG rank=%d %s issued with device %d current, the communicator is on %d",
                comm->rank, what, scriptedCurrentDevice(), comm->device);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

// Enqueues a collective: it is ncclInProgress for a few polls, then `move` runs and the stream is
// busy for a few queries -- or for ever where the script makes this collective hang or fail.
ncclResult_t enqueue(ncclComm* comm, cudaStream_t stream, std::function<void()> move) {
  ++comm->collectives;
  const bool scripted = comm->collectives == comm->script.at;
  comm->pendingPolls = 2;
  comm->pendingWork = [comm, stream, scripted, move = std::move(move)] {
    move();
    stream->notReadyPolls = 3;
    if (!scripted) return;
    if (comm->script.scenario == "hang-at") {
      stream->hung = true;  // a peer that stopped answering: NCCL's kernel waits for it
    } else if (comm->script.scenario == "remote-error-at") {
      stream->hung = true;  // until the proxy thread notices the closed connection
      comm->errorCountdown = 5;
    }
  };
  return ncclInProgress;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "scripted NCCL error";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm != nullptr ? comm->lastError.c_str() : "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::ifstream random("/dev/urandom", std::ios::binary);
  random.read(id->internal, sizeof(id->internal));
  return random ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int ranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  auto* comm = new ncclComm;
  comm->rank = rank;
  comm->ranks = ranks;
  comm->device = scriptedCurrentDevice();
  comm->script = readScript();
  char hex[17];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[i]));
  }
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  scriptedLog("init rank=%d ranks=%d device=%d attempt=%s blocking=%d id=%s", rank, ranks,
              comm->device, attempt != nullptr ? attempt : "-",
              config != nullptr ? config->blocking : 1, hex);
  comm->pendingPolls = 3;
  comm->neverDone = comm->script.scenario == "init-hang";  // a rank that never joins
  *out = comm;
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm->errorCountdown > 0 && --comm->errorCountdown == 0) {
    comm->asyncError = ncclRemoteError;
    comm->lastError = "scripted: rank 1 closed its connection";
  }
  if (comm->asyncError != ncclSuccess) {
    *state = comm->asyncError;
  } else if (comm->neverDone) {
    *state = ncclInProgress;
  } else if (comm->pendingPolls > 0) {
    *state = ncclInProgress;
    if (--comm->pendingPolls == 0 && comm->pendingWork) {
      comm->pendingWork();
      comm->pendingWork = nullptr;
    }
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* receive, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = count * sizeOf(type);
  if (const ncclResult_t refused = admit(comm, "ncclAllReduce", send, bytes, receive, bytes)) {
    return refused;
  }
  // Every op over one rank's value is that value.
  return enqueue(comm, stream, [=] { std::memmove(receive, send, bytes); });
}

ncclResult_t ncclBroadcast(const void* send, void* receive, std::size_t count, ncclDataType_t type,
                           int, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = count * sizeOf(type);
  if (const ncclResult_t refused = admit(comm, "ncclBroadcast", send, bytes, receive, bytes)) {
    return refused;
  }
  return enqueue(comm, stream, [=] { std::memmove(receive, send, bytes); });
}

ncclResult_t ncclAllGather(const void* send, void* receive, std::size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = count * sizeOf(type);
  if (const ncclResult_t refused =
          admit(comm, "ncclAllGather", send, bytes, receive, bytes * comm->ranks)) {
    return refused;
  }
  char* slot = static_cast<char*>(receive) + bytes * comm->rank;
  return enqueue(comm, stream, [=] { std::memmove(slot, send, bytes); });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  scriptedLog("finalize rank=%d", comm->rank);
  if (comm->pendingPolls > 0 || comm->neverDone) {
    scriptedLog("BUG rank=%d ncclCommFinalize while the communicator is still ncclInProgress",
                comm->rank);
    return ncclInvalidUsage;
  }
  comm->pendingPolls = 2;
  comm->neverDone = comm->script.scenario == "finalize-hang";  // a peer that never finalizes
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  scriptedLog("destroy rank=%d", comm->rank);
  if (comm->pendingPolls > 0 || comm->neverDone) {
    scriptedLog("BUG rank=%d ncclCommDestroy before ncclCommFinalize completed", comm->rank);
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  scriptedLog("abort rank=%d", comm->rank);
  delete comm;
  return ncclSuccess;
}

}  // extern "C"
