#include "etcd_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ports.h"
#include "subprocess.h"

namespace ddprun::test {
namespace {

using namespace std::chrono_literals;

std::string statusText(int status) {
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// The group's anchor: a child of this thread that only waits, so that the group exists
// whichever members are down, and a member restarted later can join it.
pid_t startAnchor() {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exit: the test may have threads.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    for (;;) ::pause();
  }
  ::setpgid(pid, pid);  // also here: whichever of the two runs first
  return pid;
}

}  // namespace

void EtcdCluster::skipUnlessInstalled() {
  for (const char* program : {kEtcd, kEtcdctl}) {
    if (::access(program, X_OK) != 0) {
      std::cout
          << "skipped: " << program
          << " is not installed (scripts/install-deps.sh installs etcd-server and etcd-client)"
          << std::endl;
      std::exit(77);
    }
  }
}

EtcdCluster::EtcdCluster(Options options) : options_(std::move(options)) {
  // /dev/shm when there is one: etcd fsyncs every commit, which on a shared disk makes a test
  // slow and its timing noisy.
  std::string base = std::filesystem::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0
                         ? "/dev/shm"
                         : "/tmp";
  std::string pattern = base + "/ddprun-etcd-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed in " + base);
  directory_ = pattern;
  token_ =
      "ddprun-test-" + std::to_string(::getpid()) + "-" + directory_.substr(directory_.size() - 6);
  group_ = startAnchor();
  // Ports the kernel just handed out, all different (a port taken again in between makes the
  // start fail with the member's "address already in use" in its log).
  std::vector<std::uint16_t> ports;
  while (ports.size() < 2 * static_cast<std::size_t>(options_.members)) {
    const std::uint16_t port = freePort();
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
  for (int i = 0; i < options_.members; ++i) {
    Member member;
    member.name = "m" + std::to_string(i);
    member.dataDir = directory_ + "/" + member.name + ".etcd";
    member.logFile = directory_ + "/" + member.name + ".log";
    member.clientPort = ports[2 * i];
    member.peerPort = ports[2 * i + 1];
    members_.push_back(member);
  }
  try {
    for (int i = 0; i < size(); ++i) start(i);
    waitHealthy(30s);
  } catch (...) {
    cleanUp();
    throw;
  }
}

EtcdCluster::~EtcdCluster() { cleanUp(); }

void EtcdCluster::cleanUp() {
  if (group_ > 0) {
    ::kill(-group_, SIGKILL);
    for (Member& member : members_) {
      if (member.pid > 0) ::waitpid(member.pid, nullptr, 0);
      member.pid = -1;
    }
    ::waitpid(group_, nullptr, 0);
    group_ = -1;
  }
  if (!directory_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
    directory_.clear();
  }
}

std::string EtcdCluster::clientUrl(int member) const {
  return std::string(tls() ? "https" : "http") +
         "://127.0.0.1:" + std::to_string(members_.at(member).clientPort);
}

std::string EtcdCluster::endpoints(std::vector<int> order) const {
  if (order.empty()) {
    for (int i = 0; i < size(); ++i) order.push_back(i);
  }
  std::string out;
  for (int i : order) {
    out += (out.empty() ? "" : ",") + std::string(tls() ? "https://" : "") +
           "127.0.0.1:" + std::to_string(clientPort(i));
  }
  return out;
}

void EtcdCluster::start(int index) {
  Member& member = members_.at(index);
  std::string initialCluster;
  for (const Member& m : members_) {
    initialCluster += (initialCluster.empty() ? "" : ",") + m.name +
                      "=http://127.0.0.1:" + std::to_string(m.peerPort);
  }
  const std::string client = clientUrl(index);
  const std::string peer = "http://127.0.0.1:" + std::to_string(member.peerPort);
  std::vector<std::string> arguments = {kEtcd,
                                        "--name",
                                        member.name,
                                        "--data-dir",
                                        member.dataDir,
                                        "--listen-client-urls",
                                        client,
                                        "--advertise-client-urls",
                                        client,
                                        "--listen-peer-urls",
                                        peer,
                                        "--initial-advertise-peer-urls",
                                        peer,
                                        "--initial-cluster",
                                        initialCluster,
                                        "--initial-cluster-token",
                                        token_,
                                        "--initial-cluster-state",
                                        "new",  // ignored by a restart: the data directory decides
                                        "--logger",
                                        "zap",
                                        "--log-outputs",
                                        "stderr"};
  if (tls()) {
    for (const std::string& flag :
         {"--cert-file=" + options_.tlsCertificate, "--key-file=" + options_.tlsKey,
          "--trusted-ca-file=" + options_.tlsCertificate, std::string("--client-cert-auth")}) {
      arguments.push_back(flag);
    }
  }
  arguments.insert(arguments.end(), options_.extraArguments.begin(), options_.extraArguments.end());
  // Everything the child needs is made before fork: it may only make async-signal-safe calls.
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const int log = ::open(member.logFile.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) throw std::runtime_error("cannot open " + member.logFile);
  const pid_t parent = ::getpid();
  const pid_t group = group_;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    ::setpgid(0, group);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::dup2(log, 1);
    ::dup2(log, 2);
    const int devNull = ::open("/dev/null", O_RDONLY);
    if (devNull >= 0) ::dup2(devNull, 0);
    // Default dispositions and an empty mask, whatever the test set.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(kEtcd, argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, group);
  ::close(log);
  member.pid = pid;
  member.stopped = false;
  member.lastExit.clear();
  member.exitedByItself = false;
}

bool EtcdCluster::running(int index) {
  Member& member = members_.at(index);
  if (member.pid <= 0) return false;
  int status = 0;
  if (::waitpid(member.pid, &status, WNOHANG) == member.pid) {
    member.lastExit = statusText(status);
    member.pid = -1;
    member.exitedByItself = true;
    return false;
  }
  return true;
}

void EtcdCluster::kill(int index) {
  Member& member = members_.at(index);
  if (member.pid <= 0) return;
  ::kill(member.pid, SIGKILL);
  int status = 0;
  ::waitpid(member.pid, &status, 0);
  member.lastExit = statusText(status);
  member.pid = -1;
  member.stopped = false;
}

void EtcdCluster::stop(int index) {
  Member& member = members_.at(index);
  if (member.pid > 0 && ::kill(member.pid, SIGSTOP) == 0) member.stopped = true;
}

void EtcdCluster::resume(int index) {
  Member& member = members_.at(index);
  if (member.pid > 0 && ::kill(member.pid, SIGCONT) == 0) member.stopped = false;
}

void EtcdCluster::restart(int index) {
  if (running(index)) return;
  start(index);
}

void EtcdCluster::heal(std::chrono::milliseconds timeout) {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].stopped) resume(i);
    if (!running(i)) start(i);
  }
  waitHealthy(timeout);
}

std::string EtcdCluster::liveUrls() {
  std::string urls;
  for (int i = 0; i < size(); ++i) {
    if (running(i) && !members_[i].stopped) urls += (urls.empty() ? "" : ",") + clientUrl(i);
  }
  return urls;
}

void EtcdCluster::enableAuth(const std::string& prefix, const std::string& user,
                             const std::string& password) {
  etcdctl({"user", "add", "root:rootpw", "--interactive=false"});
  etcdctl({"role", "add", "job"});
  etcdctl({"role", "grant-permission", "job", "readwrite", prefix, "--prefix=true"});
  etcdctl({"user", "add", user + ":" + password, "--interactive=false"});
  etcdctl({"user", "grant-role", user, "job"});
  etcdctl({"auth", "enable"});
}

std::string EtcdCluster::etcdctl(const std::vector<std::string>& arguments) {
  std::vector<std::string> argv = {kEtcdctl, "--endpoints=" + liveUrls(), "--dial-timeout=1s",
                                   "--command-timeout=2s"};
  if (tls()) {
    for (const std::string& flag :
         {"--cacert=" + options_.tlsCertificate, "--cert=" + options_.tlsCertificate,
          "--key=" + options_.tlsKey}) {
      argv.push_back(flag);
    }
  }
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  Subprocess process(argv, {"ETCDCTL_API=3"});
  const auto status = process.wait(10s);
  if (!status || *status != 0) {
    throw std::runtime_error("etcdctl failed: " + process.describe(2000));
  }
  return process.output();
}

void EtcdCluster::waitHealthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string lastSeen = "(not asked yet)";
  for (;;) {
    bool exited = false;
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid > 0) running(i);  // reaps one that exited
      if (members_[i].exitedByItself) exited = true;
    }
    if (!exited) {
      try {
        etcdctl({"endpoint", "health"});
        return;
      } catch (const std::exception& error) {
        lastSeen = error.what();
      }
    }
    // A member that exited (a port taken, bad flags) will not become healthy: say so at once.
    if (exited || std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error(
          "etcd cluster in " + directory_ + " not healthy" +
          (exited ? " (a member exited)" : " after " + std::to_string(timeout.count()) + " ms") +
          "; etcdctl said:\n" + lastSeen + "\n" + describe());
    }
    std::this_thread::sleep_for(250ms);
  }
}

int EtcdCluster::leader(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      // [{"Endpoint": "http://...", "Status": {"header": {"member_id": N, ...}, "leader": L, ...}}]
      const auto statuses = nlohmann::json::parse(etcdctl({"endpoint", "status", "-w", "json"}));
      for (const auto& entry : statuses) {
        const auto& status = entry.at("Status");
        if (status.value("leader", std::uint64_t{0}) == 0) continue;
        if (status.at("header").at("member_id").get<std::uint64_t>() !=
            status.at("leader").get<std::uint64_t>())
          continue;
        const std::string url = entry.at("Endpoint").get<std::string>();
        for (int i = 0; i < size(); ++i) {
          if (clientUrl(i) == url) return i;
        }
      }
    } catch (const std::exception&) {
      // no answer yet (an election): ask again
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(200ms);
  }
}

std::string EtcdCluster::logTail(int index, std::size_t bytes) const {
  std::ifstream in(members_.at(index).logFile, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > bytes) text = "[...]" + text.substr(text.size() - bytes);
  return text;
}

std::string EtcdCluster::describe(std::size_t tailBytes) {
  std::ostringstream out;
  for (int i = 0; i < size(); ++i) {
    const bool alive = running(i);
    const Member& member = members_[i];
    out << "--- etcd member " << member.name << " (client " << clientUrl(i) << ", peer port "
        << member.peerPort << "): "
        << (alive ? (member.stopped ? "stopped" : "running") + std::string(" as pid ") +
                        std::to_string(member.pid)
                  : "not running" + (member.lastExit.empty() ? "" : ", " + member.lastExit))
        << "; its log's tail:\n"
        << logTail(i, tailBytes) << "\n";
  }
  return out.str();
}

}  // namespace ddprun::test
