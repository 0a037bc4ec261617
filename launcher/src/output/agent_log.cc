#include "output/agent_log.h"

#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string>

namespace ddprun::launcher {
namespace {

class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(std::shared_ptr<ConsoleWriter> writer) : writer_(std::move(writer)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t line;
    formatter_->format(message, line);
    writer_->write(std::string(line.data(), line.size()));
  }
  void flush_() override {}

 private:
  std::shared_ptr<ConsoleWriter> writer_;
};

}  // namespace

LogThroughConsole::LogThroughConsole(std::shared_ptr<ConsoleWriter> writer)
    : logger_(spdlog::default_logger()), saved_(logger_->sinks()) {
  auto sink = std::make_shared<ConsoleSink>(std::move(writer));
  sink->set_pattern(kLogPattern);
  logger_->sinks() = {sink};
}

LogThroughConsole::~LogThroughConsole() { logger_->sinks() = saved_; }

}  // namespace ddprun::launcher
