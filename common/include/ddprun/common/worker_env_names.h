// The names of the variables in each worker's environment (torchrun's contract plus ddprun's own,
// docs/env_contract.md), written once: the launcher sets them (launcher/src/worker_env.cc) and the
// worker runtime reads them (worker_runtime/src/options.cc).
#pragma once

namespace ddprun::common {

// The worker's place in the job.
inline constexpr const char* kEnvRank = "RANK";
inline constexpr const char* kEnvLocalRank = "LOCAL_RANK";
inline constexpr const char* kEnvWorldSize = "WORLD_SIZE";
inline constexpr const char* kEnvLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kEnvGroupRank = "GROUP_RANK";
inline constexpr const char* kEnvGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kEnvRoleRank = "ROLE_RANK";
inline constexpr const char* kEnvRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kEnvRoleName = "ROLE_NAME";

// The store the workers rendezvous through.
inline constexpr const char* kEnvMasterAddr = "MASTER_ADDR";
inline constexpr const char* kEnvMasterPort = "MASTER_PORT";

// torchelastic's job variables.
inline constexpr const char* kEnvTorchelasticRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kEnvTorchelasticRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kEnvTorchelasticMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kEnvTorchelasticUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kEnvTorchelasticErrorFile = "TORCHELASTIC_ERROR_FILE";
inline constexpr const char* kEnvTorchelasticSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
// The value of kEnvTorchelasticUseAgentStore that means "the agent hosts the store" (Python's
// str(True)); anything else makes rank 0 host one, as torch's env:// does.
inline constexpr const char* kAgentStoreEnabled = "True";

// Library settings the launcher sets unless the user did.
inline constexpr const char* kEnvNcclAsyncErrorHandling = "NCCL_ASYNC_ERROR_HANDLING";  // torch 1.x
inline constexpr const char* kEnvTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kEnvOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr const char* kEnvCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

// ddprun's own: the job-global rendezvous round, and the token that marks an agent's workers and
// everything they start.
inline constexpr const char* kEnvDdprunGeneration = "DDPRUN_GENERATION";
inline constexpr const char* kEnvDdprunAgent = "DDPRUN_AGENT";
// Set by `ddprun detach` in place of DDPRUN_AGENT, to the same value: a process kept after the
// job on purpose, which that agent spares (launcher/src/core/kept_process.h).
inline constexpr const char* kEnvDdprunDetached = "DDPRUN_DETACHED";
// The worker's progress heartbeat: a file whose modification time the worker sets to report
// progress (os.utime(path)); --hang-timeout monitors it.
inline constexpr const char* kEnvDdprunHeartbeatFile = "DDPRUN_HEARTBEAT_FILE";
// The graceful stop's notice: a path that does not exist while the worker may run; the agent
// creates the file (complete when it appears: "reason=...", "deadline=<epoch seconds>") when it
// starts to stop the workers, before their signal. A worker that sees it saves and exits
// (docs/env_contract.md, "Stopping gracefully").
inline constexpr const char* kEnvDdprunStopFile = "DDPRUN_STOP_FILE";

// torch's FileTimer watchdog: "1" makes the agent serve the named pipe at kEnvTorchelasticTimerFile
// (a path of the agent's choosing when unset), which every worker gets.
inline constexpr const char* kEnvTorchelasticEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr const char* kEnvTorchelasticTimerFile = "TORCHELASTIC_TIMER_FILE";

// torch's health-check port: the agent serves GET /healthz there (agent/health_endpoint.h), on
// loopback unless kEnvDdprunHealthCheckAddr names another address. kEnvDdprunHealthCheckHosts:
// "name1,name2", host names its `Host:` header may give besides this server's addresses.
inline constexpr const char* kEnvTorchelasticHealthCheckPort = "TORCHELASTIC_HEALTH_CHECK_PORT";
inline constexpr const char* kEnvDdprunHealthCheckAddr = "DDPRUN_HEALTH_CHECK_ADDR";
inline constexpr const char* kEnvDdprunHealthCheckHosts = "DDPRUN_HEALTH_CHECK_HOSTS";

// PyTorch's Flight Recorder (launcher/src/hang/flight_recorder.h): on when a buffer size is over 0
// (TORCH_FR_BUFFER_SIZE, newer torch, before TORCH_NCCL_TRACE_BUFFER_SIZE); the agent gives each
// worker the pipe whose write asks for a dump and the prefix the dump is written under, unless
// the user set them (newer torch reads TORCH_FR_DUMP_TEMP_FILE before the NCCL name).
inline constexpr const char* kEnvTorchNcclTraceBufferSize = "TORCH_NCCL_TRACE_BUFFER_SIZE";
inline constexpr const char* kEnvTorchFrBufferSize = "TORCH_FR_BUFFER_SIZE";
inline constexpr const char* kEnvTorchNcclDebugInfoPipeFile = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";
inline constexpr const char* kEnvTorchNcclDebugInfoTempFile = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
inline constexpr const char* kEnvTorchFrDumpTempFile = "TORCH_FR_DUMP_TEMP_FILE";

}  // namespace ddprun::common
