// LogCapture: collects what ddprun logs through spdlog's default logger while it is alive, so a
// test can assert that an event was reported (and how).
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>

namespace ddprun::test {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()), sink_(std::make_shared<Sink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }

  std::string text() const { return sink_->text(); }

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard lock(this->mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& message) override {
      spdlog::memory_buf_t formatted;
      this->formatter_->format(message, formatted);
      text_.append(formatted.data(), formatted.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<Sink> sink_;
};

// Resident set size of this process in bytes (VmRSS).
std::size_t residentBytes();

}  // namespace ddprun::test
