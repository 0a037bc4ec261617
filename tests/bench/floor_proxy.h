// FloorProxy: the least a user-space TCP hop can cost, as an anchor for the workers' relay. One
// thread, level-triggered epoll, one read and one write per message, no handshake, no checks:
// any relay that copies bytes in user space pays at least this much (two extra socket operations
// per message per direction and a thread wake-up), whatever it does besides.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>

class FloorProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and forwards every connection to 127.0.0.1:`target`.
  explicit FloorProxy(std::uint16_t target);
  ~FloorProxy();
  FloorProxy(const FloorProxy&) = delete;
  FloorProxy& operator=(const FloorProxy&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  void run();
  void accept();
  void close(int fd);

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  int epoll_ = -1;
  int stop_ = -1;  // an eventfd: the destructor's wake-up
  std::unordered_map<int, int> peer_;
  std::thread thread_;
};
