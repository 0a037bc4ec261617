// PyTorch's Flight Recorder (hang/flight_recorder.h): which workers get the agent's pipe and dump
// paths, and the request through a real FIFO read by a stand-in for torch's DumpPipe (made and
// read as torch does: mkfifo, O_RDONLY|O_NONBLOCK, a read at every poll, the dump written by an
// ofstream). Every wait is bounded well below the test's CTest TIMEOUT and says what it saw.
#include "hang/flight_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "core/worker_failure.h"
#include "process/worker_env.h"
#include "temp_dir.h"

using namespace ddprun::launcher;
using namespace std::chrono_literals;
using ddprun::test::TempDir;
using Clock = std::chrono::steady_clock;
using Environment = std::map<std::string, std::string>;

namespace {

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// torch's DumpPipe and dump, standing in: the FIFO is made (and opened for reading) at once; a
// thread reads it every `poll` and, when `dumps`, writes `dump` after a read.
class StandInReader {
 public:
  StandInReader(std::string pipe, std::string dump, std::chrono::milliseconds poll, bool dumps)
      : dump_(std::move(dump)), poll_(poll), dumps_(dumps) {
    ::unlink(pipe.c_str());
    REQUIRE(::mkfifo(pipe.c_str(), 0666) == 0);
    fd_ = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(fd_ >= 0);
    thread_ = std::thread([this] { run(); });
  }
  ~StandInReader() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int requests() const { return requests_.load(); }

 private:
  void run() {
    while (!stop_) {
      std::this_thread::sleep_for(poll_);
      char buffer[128];
      if (::read(fd_, buffer, sizeof buffer) > 0) {
        ++requests_;
        if (dumps_) {
          std::ofstream file(dump_, std::ios::binary);
          file << std::string(64 * 1024, 'x');
        }
      }
    }
  }

  std::string dump_;
  std::chrono::milliseconds poll_;
  bool dumps_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("flight recorder: on only when the buffer size torch reads is above 0",
          "[flight_recorder][unit]") {
  CHECK_FALSE(flightRecorderEnabled({}));
  CHECK_FALSE(flightRecorderEnabled({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "0"}}));
  CHECK_FALSE(flightRecorderEnabled({{"TORCH_NCCL_TRACE_BUFFER_SIZE", ""}}));
  CHECK_FALSE(flightRecorderEnabled({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "lots"}}));
  CHECK_FALSE(flightRecorderEnabled({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "-5"}}));
  CHECK(flightRecorderEnabled({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}}));
  CHECK(flightRecorderEnabled({{"TORCH_FR_BUFFER_SIZE", "1"}}));
  // Newer torch reads TORCH_FR_BUFFER_SIZE first: its 0 turns the recorder off.
  CHECK_FALSE(flightRecorderEnabled(
      {{"TORCH_FR_BUFFER_SIZE", "0"}, {"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}}));
}

TEST_CASE("flight recorder: the agent's pipe and dump prefixes, unless the user set their own",
          "[flight_recorder][unit]") {
  const Environment on{{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}};
  SECTION("off: nothing set, nothing to ask") {
    CHECK_FALSE(flightRecorderPlan({}, 3, "/private/pipe_", "/attempt_0/1/trace_").has_value());
  }
  SECTION("on, nothing set by the user: both the agent's") {
    const auto plan = flightRecorderPlan(on, 3, "/private/pipe_", "/attempt_0/1/trace_");
    REQUIRE(plan.has_value());
    CHECK(plan->set == Environment{{"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "/private/pipe_"},
                                   {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/attempt_0/1/trace_"}});
    // torch's names: "<prefix><global rank>.pipe" and "<prefix><global rank>".
    CHECK(plan->target.pipe == "/private/pipe_3.pipe");
    CHECK(plan->target.dump == "/attempt_0/1/trace_3");
  }
  SECTION("the user's pipe and dump are kept, and asked through") {
    Environment mine = on;
    mine["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = "/home/me/fr_pipe_";
    mine["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = "/home/me/fr_dump_";
    const auto plan = flightRecorderPlan(mine, 7, "/private/pipe_", "/attempt_0/1/trace_");
    REQUIRE(plan.has_value());
    CHECK(plan->set.empty());
    CHECK(plan->target.pipe == "/home/me/fr_pipe_7.pipe");
    CHECK(plan->target.dump == "/home/me/fr_dump_7");
  }
  SECTION("TORCH_FR_DUMP_TEMP_FILE, which newer torch reads first, names the dump") {
    Environment mine = on;
    mine["TORCH_FR_DUMP_TEMP_FILE"] = "/home/me/new_";
    mine["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = "/home/me/old_";
    const auto plan = flightRecorderPlan(mine, 0, "/private/pipe_", "/attempt_0/0/trace_");
    REQUIRE(plan.has_value());
    CHECK(plan->set == Environment{{"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "/private/pipe_"}});
    CHECK(plan->target.dump == "/home/me/new_0");
  }
  SECTION("an empty value is torch's unset: the agent's is used") {
    Environment mine = on;
    mine["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = "";
    const auto plan = flightRecorderPlan(mine, 1, "/private/pipe_", "/attempt_0/1/trace_");
    REQUIRE(plan.has_value());
    CHECK(plan->set.at("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/private/pipe_");
  }
  SECTION("no prefix of the agent's where one is needed: not asked") {
    CHECK_FALSE(flightRecorderPlan(on, 1, "", "/attempt_0/1/trace_").has_value());
  }
}

TEST_CASE("flight recorder: the worker gets the plan's variables, replacing none of its own",
          "[flight_recorder][unit]") {
  LaunchConfig config;
  const Environment inherited{{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}, {"PATH", "/usr/bin"}};
  const auto plan = flightRecorderPlan(inherited, 0, "/private/pipe_", "/a/0/trace_");
  REQUIRE(plan.has_value());
  const auto entries = workerEnvironment(inherited, config, WorkerPlacement{}, RoundEnvironment{},
                                         "/a/0/error.json", {}, {}, plan->set);
  auto has = [&](const std::string& entry) {
    return std::find(entries.begin(), entries.end(), entry) != entries.end();
  };
  CHECK(has("TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/private/pipe_"));
  CHECK(has("TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/a/0/trace_"));
  CHECK(has("TORCH_NCCL_TRACE_BUFFER_SIZE=2000"));
}

TEST_CASE("flight recorder: the byte goes into the reader's pipe and the dump is waited for",
          "[flight_recorder][unit]") {
  TempDir dir;
  const FlightRecorderTarget target{dir.file("pipe_0.pipe"), dir.file("trace_0")};
  SECTION("a reader that dumps: the dump is named once it stopped growing") {
    StandInReader reader(target.pipe, target.dump, 20ms, /*dumps=*/true);
    const auto start = Clock::now();
    const FlightRecorderDump dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    const long long took = msSince(start);
    INFO("took " << took << " ms; notes: " << dump.notes.size());
    CHECK(dump.written);
    CHECK(reader.requests() == 1);
    CHECK(dump.file == target.dump);
    CHECK(dump.settled);
    CHECK(dump.notes.empty());
    CHECK(took < 4000);
    CHECK(flightRecorderSummary(dump) ==
          std::vector<std::string>{"Flight Recorder dump: " + target.dump});
  }
  SECTION("an older dump at the name: only a new one counts") {
    ddprun::test::writeFile(target.dump, "old");
    const struct timespec old[2] = {{1, 0}, {1, 0}};
    REQUIRE(::utimensat(AT_FDCWD, target.dump.c_str(), old, 0) == 0);
    StandInReader reader(target.pipe, target.dump, 20ms, /*dumps=*/true);
    const FlightRecorderDump dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    CHECK(dump.file == target.dump);
    CHECK(ddprun::test::readFile(target.dump).size() == 64 * 1024);
  }
  SECTION("a reader that never dumps: asked, then given up on at the budget") {
    StandInReader reader(target.pipe, target.dump, 20ms, /*dumps=*/false);
    ddprun::test::writeFile(target.dump, "old");  // there before: not a dump of this request
    const auto start = Clock::now();
    const FlightRecorderDump dump = triggerFlightRecorder(target, ::getpid(), 300ms);
    const long long took = msSince(start);
    CHECK(dump.written);
    CHECK(dump.file.empty());
    REQUIRE(dump.notes.size() == 1);
    CHECK_THAT(dump.notes[0], Catch::Contains("but no dump in " + target.dump));
    CHECK(took >= 300);
    CHECK(took < 2300);
  }
}

TEST_CASE("flight recorder: no reader, no pipe, or not a pipe of the worker's: said, at once",
          "[flight_recorder][unit]") {
  TempDir dir;
  const FlightRecorderTarget target{dir.file("pipe_0.pipe"), dir.file("trace_0")};
  const auto start = Clock::now();
  FlightRecorderDump dump;
  SECTION("a FIFO nobody reads (a process group that is not NCCL)") {
    REQUIRE(::mkfifo(target.pipe.c_str(), 0600) == 0);
    dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    REQUIRE(dump.notes.size() == 1);
    CHECK(dump.notes[0] ==
          "no Flight Recorder reader on " + target.pipe + " (is the process group NCCL?)");
  }
  SECTION("no FIFO at all") {
    dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    REQUIRE(dump.notes.size() == 1);
    CHECK_THAT(dump.notes[0], Catch::StartsWith("no Flight Recorder pipe at " + target.pipe));
  }
  SECTION("a regular file is never written") {
    ddprun::test::writeFile(target.pipe, "");
    dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    REQUIRE(dump.notes.size() == 1);
    CHECK_THAT(dump.notes[0], Catch::Contains("is not a FIFO"));
    CHECK(ddprun::test::readFile(target.pipe).empty());
  }
  SECTION("a link is never followed, even to a read FIFO") {
    const std::string real = dir.file("real.pipe");
    StandInReader reader(real, target.dump, 20ms, /*dumps=*/true);
    REQUIRE(::symlink(real.c_str(), target.pipe.c_str()) == 0);
    dump = triggerFlightRecorder(target, ::getpid(), 5000ms);
    REQUIRE(dump.notes.size() == 1);
    CHECK_THAT(dump.notes[0], Catch::Contains("is a symbolic link"));
    std::this_thread::sleep_for(100ms);
    CHECK(reader.requests() == 0);
  }
  SECTION("a process that does not exist: nothing written") {
    REQUIRE(::mkfifo(target.pipe.c_str(), 0600) == 0);
    dump = triggerFlightRecorder(target, 0x7ffffff0, 5000ms);
    REQUIRE(dump.notes.size() == 1);
    CHECK_THAT(dump.notes[0], Catch::Contains("cannot tell whose process"));
  }
  CHECK_FALSE(dump.written);
  CHECK(dump.file.empty());
  CHECK(msSince(start) < 1000);
}

TEST_CASE("flight recorder: the dump and its note travel with the failure",
          "[flight_recorder][unit]") {
  WorkerFailure failure;
  failure.flightRecorderDump = "/logs/attempt_0/1/nccl_trace_rank_1";
  failure.flightRecorderNote = "still growing";
  const WorkerFailure back = failureFromJson(toJson(failure));
  CHECK(back.flightRecorderDump == failure.flightRecorderDump);
  CHECK(back.flightRecorderNote == failure.flightRecorderNote);
}
