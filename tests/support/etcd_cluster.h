// A real etcd cluster for tests: N members of Debian's etcd-server (3.4, /usr/bin/etcd) on
// 127.0.0.1 at free ports, with their data in a private temporary directory (in /dev/shm, so
// etcd's fsyncs cost nothing), started at construction and waited for until healthy. Every member
// is in one process group of the cluster's own, and dies with the thread that made it
// (PR_SET_PDEATHSIG): no member outlives the test, however it ends. Members can be killed,
// stopped, continued and restarted, to test what a client sees when etcd misbehaves.
//
// Health and the leader are asked of etcd with etcdctl (etcd-client), not with the client under
// test. Not thread-safe: one thread (the one that made it) uses a cluster.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::test {

class EtcdCluster {
 public:
  static constexpr const char* kEtcd = "/usr/bin/etcd";
  static constexpr const char* kEtcdctl = "/usr/bin/etcdctl";

  struct Options {
    int members = 3;
    // Given to every member after the cluster's own flags (e.g. "--auth-token-ttl=1").
    std::vector<std::string> extraArguments;
    // With both: clients speak https to the members, which serve this certificate and ask
    // clients for one signed by it (--client-cert-auth, the certificate as its own CA). Peers
    // stay on plain http.
    std::string tlsCertificate;
    std::string tlsKey;
  };

  // Ends the test program with 77 (CTest's "skipped") when etcd or etcdctl is not installed.
  static void skipUnlessInstalled();

  // Starts the members and waits (at most 30 s) until every one is healthy. Throws
  // std::runtime_error with each member's log tail when that does not happen.
  explicit EtcdCluster(Options options);
  EtcdCluster() : EtcdCluster(Options{}) {}
  // SIGKILL to the cluster's process group; every member reaped; the data removed.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  std::uint16_t clientPort(int member) const { return members_.at(member).clientPort; }
  std::uint16_t peerPort(int member) const { return members_.at(member).peerPort; }
  // "http://127.0.0.1:<port>" (https with TLS)
  std::string clientUrl(int member) const;
  // "127.0.0.1:<port>,..." for the members in `order` (all, in order, when empty): a
  // --rdzv-endpoint value. With TLS each starts with https://.
  std::string endpoints(std::vector<int> order = {}) const;
  pid_t pid(int member) const { return members_.at(member).pid; }

  void kill(int member);     // SIGKILL, and reaped
  void stop(int member);     // SIGSTOP: alive, accepting connections, answering nothing
  void resume(int member);   // SIGCONT
  void restart(int member);  // a killed member started again on its data
  bool running(int member);  // started and not exited (stopped counts as running)

  // Every member continued or restarted, and the cluster healthy (at most `timeout`).
  void heal(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Until every running, not stopped member says it is healthy (etcdctl endpoint health, which
  // makes a linearizable read: it needs the leader). Throws with the logs after `timeout`.
  void waitHealthy(std::chrono::milliseconds timeout);
  // The member that the running, not stopped members take for their leader, once one does;
  // -1 after `timeout`.
  int leader(std::chrono::milliseconds timeout);

  // etcdctl with --endpoints of the running, not stopped members, and `arguments`; its stdout.
  // Throws with its stderr when it fails.
  std::string etcdctl(const std::vector<std::string>& arguments);
  // Turns on etcd's auth: user root (password "rootpw", as etcd requires one), a role "job" that
  // may read and write the keys under `prefix` only, and `user` (password `password`) in it.
  void enableAuth(const std::string& prefix, const std::string& user, const std::string& password);

  std::string logTail(int member, std::size_t bytes = 3000) const;
  // Each member: pid, state, ports, log tail. For failure messages.
  std::string describe(std::size_t tailBytes = 2000);

 private:
  struct Member {
    std::string name;
    std::string dataDir;
    std::string logFile;
    std::uint16_t clientPort = 0;
    std::uint16_t peerPort = 0;
    pid_t pid = -1;
    bool stopped = false;
    std::string lastExit;         // how it ended, when it did
    bool exitedByItself = false;  // not by kill(): it will not become healthy
  };
  void cleanUp();
  void start(int member);
  bool tls() const { return !options_.tlsCertificate.empty(); }
  std::string liveUrls();

  Options options_;
  std::string directory_;
  std::string token_;
  pid_t group_ = -1;  // the anchor process leading the group
  std::vector<Member> members_;
};

}  // namespace ddprun::test
