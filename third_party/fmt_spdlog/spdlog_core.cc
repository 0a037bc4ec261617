// spdlog's compiled part (what libspdlog.so holds) for what ddprun uses: the logger, the
// registry and the default logger, the pattern formatter, and the sink bases our own sinks
// derive from (launcher/src/output/agent_log.cc, tests/support/log_capture.h). Built once as
// part of ddprun_fmt_spdlog with SPDLOG_COMPILED_LIB, so every other file sees only the
// declarations (third_party/fmt_spdlog/CMakeLists.txt says why).
#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/spdlog-inl.h>
#include <spdlog/spdlog.h>

#include <mutex>

template class SPDLOG_API spdlog::sinks::base_sink<std::mutex>;
template class SPDLOG_API spdlog::sinks::base_sink<spdlog::details::null_mutex>;
