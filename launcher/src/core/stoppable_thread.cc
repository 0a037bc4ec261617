#include "core/stoppable_thread.h"

#include <utility>

namespace ddprun::launcher {

StoppableThread::~StoppableThread() { stop(); }

void StoppableThread::start(std::function<void()> body) { thread_ = std::thread(std::move(body)); }

void StoppableThread::requestStop() {
  {
    std::lock_guard guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

void StoppableThread::stop() {
  requestStop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ddprun::launcher
