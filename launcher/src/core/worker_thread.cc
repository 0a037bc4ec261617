#include "core/worker_thread.h"

#include <utility>

namespace ddprun::launcher {

WorkerThread::~WorkerThread() { stop(); }

void WorkerThread::start(std::function<void()> body) { thread_ = std::thread(std::move(body)); }

void WorkerThread::requestStop() {
  {
    std::lock_guard guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

void WorkerThread::stop() {
  requestStop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ddprun::launcher
