// Evidence of a hung worker (hang_evidence.h) and the Python stack hook (python_stack_hook.h),
// on real processes: hung Python programs with the hook loaded through PYTHONPATH, a blocked
// native one under gdb, a forked Python child, and the chain to the sitecustomize the hook
// shadows. Every wait is bounded well below the test's CTest TIMEOUT (120 s) and says what it
// saw when it gives up (waits.h).
#include "hang/hang_evidence.h"

#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent_fakes.h"
#include "hang/python_stack_hook.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "waits.h"

using namespace ddprun::test;  // the shared test support (tests/support)
using namespace ddprun::launcher;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kPython = DDPRUN_TORCH113_PYTHON;  // /usr/bin/python3 (standard library only)
const std::string kGdb = "/usr/bin/gdb";

const std::string kEuStack = "/usr/bin/eu-stack";  // elfutils: the agent's first choice

bool haveGdb() { return ::access(kGdb.c_str(), X_OK) == 0; }
bool haveEuStack() { return ::access(kEuStack.c_str(), X_OK) == 0; }

// The unwinder the agent picks (eu-stack, else gdb), or "" when neither is installed.
std::string agentUnwinder() { return haveEuStack() ? kEuStack : haveGdb() ? kGdb : ""; }

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// The state letter of /proc/<pid>/stat ('?' when it is gone).
char stateOf(pid_t pid) {
  const std::string stat = readFile(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// Asleep in the kernel (a wait channel): past its start-up, where it will stay.
bool asleep(pid_t pid) {
  std::string wchan = readFile(fmt::format("/proc/{}/wchan", pid));
  return stateOf(pid) == 'S' && !wchan.empty() && wchan != "0";
}

// Alive, not a zombie, not stopped.
bool runsOn(pid_t pid) {
  const char state = stateOf(pid);
  return ::kill(pid, 0) == 0 && state != 'Z' && state != 'X' && state != 'T' && state != 't' &&
         state != '?';
}

std::size_t countOf(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The worker environment the agent would give: the hook added to the PYTHONPATH given (the
// test's own when none is).
std::vector<std::string> hookEnvironment(const PythonStackHook& hook,
                                         std::optional<std::string> pythonPath = std::nullopt,
                                         std::vector<std::string> extra = {}) {
  std::map<std::string, std::string> environment;
  if (pythonPath) {
    if (!pythonPath->empty()) environment["PYTHONPATH"] = *pythonPath;
  } else if (const char* inherited = ::getenv("PYTHONPATH")) {
    environment["PYTHONPATH"] = inherited;
  }
  addPythonStackHook(hook, environment);
  for (const auto& [name, value] : environment) extra.push_back(name + "=" + value);
  return extra;
}

EvidenceOptions pythonOptions(const PythonStackHook& hook) {
  EvidenceOptions options;
  options.pythonStackDir = hook.stackDir;
  options.pythonStackSignal = hook.signal;
  options.pythonWait = 5000ms;  // generous: a loaded 2-core machine
  return options;
}

// Waits for the "ready" line a script prints once it is where the test wants it.
bool becomesReady(Subprocess& process, std::chrono::milliseconds timeout = 20s) {
  const auto line = process.readLine(timeout);
  if (line && *line == "ready") return true;
  UNSCOPED_INFO("expected a 'ready' line, got " << (line ? "'" + *line + "'" : "nothing") << "\n"
                                                << process.describe());
  return false;
}

// A hung Python program: the main thread asleep two calls deep, a helper thread waiting on an
// Event.
const char* const kStuckScript = R"PY(
import threading, time
release = threading.Event()
started = threading.Event()

def waiting_helper_thread():
    started.set()
    release.wait()

def stuck_in_the_middle():
    print("ready", flush=True)
    time.sleep(3600)

def calls_the_stuck_one():
    stuck_in_the_middle()

threading.Thread(target=waiting_helper_thread, daemon=True).start()
started.wait()
calls_the_stuck_one()
)PY";

// A Python program deadlocked in C while holding the GIL (a PyDLL call keeps it): the second
// lock of a plain mutex never returns, and the other thread waits for the GIL forever.
const char* const kGilScript = R"PY(
import ctypes, threading, time

def other_thread_wants_the_gil():
    while True:
        sum(range(1000))

def stuck_holding_the_gil():
    libc = ctypes.PyDLL(None)
    mutex = ctypes.create_string_buffer(128)
    libc.pthread_mutex_lock(mutex)
    print("ready", flush=True)
    libc.pthread_mutex_lock(mutex)

threading.Thread(target=other_thread_wants_the_gil, daemon=True).start()
time.sleep(0.1)
stuck_holding_the_gil()
)PY";

// Prints what the hook and the chain left behind.
const char* const kProbeScript = R"PY(
import faulthandler, os, sys
import sitecustomize
hook_dir = os.path.realpath(sys.argv[1])
state = sys.modules.get("_ddprun_stack_hook")
print("pid", os.getpid())
print("sitecustomize-file", getattr(sitecustomize, "__file__", None))
print("hook-active", state is not None and state.file is not None)
print("faulthandler-enabled", faulthandler.is_enabled())
print("hook-dir-on-sys-path", any(p and os.path.realpath(p) == hook_dir for p in sys.path))
print("other-ran", getattr(sys, "_other_sitecustomize_ran", 0))
print("libuv-patch", any(type(f).__name__ == "_PatchOnImport" for f in sys.meta_path))
)PY";

const char* const kOtherSiteCustomize = R"PY(
import sys
print("OTHER-SITECUSTOMIZE-RAN", flush=True)
sys._other_sitecustomize_ran = getattr(sys, "_other_sitecustomize_ran", 0) + 1
)PY";

// Runs the probe to its end; its output.
std::string runProbe(const std::string& script, const std::string& hookDir,
                     const std::vector<std::string>& environment, std::string* errors = nullptr) {
  Subprocess probe({kPython, script, hookDir}, environment);
  const auto status = probe.wait(30s);
  INFO(probe.describe());
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  if (errors) *errors = probe.errors();
  return probe.output();
}

}  // namespace

TEST_CASE("hang evidence: a hung Python process dumps every thread's stack on request and runs on",
          "[hang_evidence][python]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  CHECK(hook.signal == SIGRTMIN + 5);
  CHECK(fs::exists(hook.pythonPath + "/sitecustomize.py"));
  CHECK(fs::is_directory(hook.stackDir));
  // Two directories, not three: the dumps go into the hook's directory itself, and only the
  // module directory on PYTHONPATH is one of its own (each directory costs a launch).
  CHECK(hook.stackDir == dir.path + "/hook");
  CHECK(hook.pythonPath == dir.path + "/hook/python");
  writeFile(dir.path + "/stuck.py", kStuckScript);
  Subprocess worker({kPython, dir.path + "/stuck.py"}, hookEnvironment(hook));
  REQUIRE(becomesReady(worker));

  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(worker.pid(), pythonOptions(hook));
  const long long took = msSince(start);
  std::printf("hang_evidence_test: Python stack of a hung Python process collected in %lld ms\n",
              took);
  INFO(evidence.text());
  CHECK(evidence.pid == worker.pid());
  CHECK(evidence.pythonStack.find("stuck_in_the_middle") != std::string::npos);
  CHECK(evidence.pythonStack.find("calls_the_stuck_one") != std::string::npos);
  CHECK(evidence.pythonStack.find("waiting_helper_thread") != std::string::npos);
  CHECK(evidence.nativeStack.empty());
  CHECK(fs::exists(fmt::format("{}/{}.txt", hook.stackDir, worker.pid())));
  REQUIRE(evidence.threads.size() >= 2);
  CHECK(evidence.threads.front().tid == worker.pid());
  CHECK(evidence.text().find("stuck_in_the_middle") != std::string::npos);

  // The summary puts the main thread first (its stack ends in <module>).
  const auto summary = evidence.summary(6);
  CHECK(summary.size() <= 6);
  std::string summaryText;
  for (const auto& line : summary) summaryText += line + "\n";
  INFO("summary:\n" << summaryText);
  CHECK(summaryText.find("stuck_in_the_middle") != std::string::npos);

  // Not killed: it still runs, and a second request gets a fresh dump (only the new part).
  CHECK(eventually([&] { return runsOn(worker.pid()); }, 2s, {&worker}));
  CHECK_FALSE(worker.wait(0ms).has_value());
  const HangEvidence again = collectHangEvidence(worker.pid(), pythonOptions(hook));
  INFO(again.text());
  CHECK(countOf(again.pythonStack, "stuck_in_the_middle") ==
        countOf(evidence.pythonStack, "stuck_in_the_middle"));
  CHECK(runsOn(worker.pid()));
}

TEST_CASE("hang evidence: a Python process deadlocked in C while holding the GIL still dumps",
          "[hang_evidence][python]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  writeFile(dir.path + "/gil.py", kGilScript);
  Subprocess worker({kPython, dir.path + "/gil.py"}, hookEnvironment(hook));
  REQUIRE(becomesReady(worker));

  EvidenceOptions options = pythonOptions(hook);
  options.debugger = agentUnwinder();
  options.debuggerBudget = 30000ms;  // generous: this test is about what is found, not how fast
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(worker.pid(), options);
  const long long took = msSince(start);
  std::printf(
      "hang_evidence_test: Python + native (%s) stacks of a GIL-deadlocked Python process "
      "collected in %lld ms\n",
      options.debugger.c_str(), took);
  INFO(evidence.text());
  CHECK(evidence.pythonStack.find("stuck_holding_the_gil") != std::string::npos);
  CHECK(evidence.pythonStack.find("other_thread_wants_the_gil") != std::string::npos);
  if (!options.debugger.empty()) {
    CHECK((evidence.nativeStack.find("pthread_mutex_lock") != std::string::npos ||
           evidence.nativeStack.find("lll_lock_wait") != std::string::npos));
  }
  CHECK(eventually([&] { return runsOn(worker.pid()); }, 2s, {&worker}));
}

TEST_CASE("hang evidence: gdb names the function a native process blocks in, and it runs on",
          "[hang_evidence][gdb]") {
  if (!haveGdb()) {
    WARN("no " << kGdb << ": the native stack is not tested");
    return;
  }
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));

  EvidenceOptions options;
  options.debugger = kGdb;
  options.debuggerBudget = 30000ms;
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(sleeper.pid(), options);
  const long long took = msSince(start);
  std::printf("hang_evidence_test: gdb backtrace of /bin/sleep collected in %lld ms\n", took);
  INFO(evidence.text());
  CHECK(evidence.nativeStack.find("nanosleep") != std::string::npos);
  CHECK(evidence.nativeStack.rfind("Thread ", 0) == 0);  // only backtrace lines are kept
  CHECK(evidence.nativeStack.find("detached") == std::string::npos);
  CHECK(evidence.pythonStack.empty());
  REQUIRE(evidence.threads.size() == 1);
  CHECK(evidence.threads[0].tid == sleeper.pid());
  CHECK(evidence.threads[0].name == "sleep");
  CHECK(evidence.threads[0].state == 'S');
  CHECK(!evidence.threads[0].waitChannel.empty());
  CHECK(evidence.threads[0].waitChannel != "0");
  const auto summary = evidence.summary(4);
  REQUIRE(!summary.empty());
  CHECK(summary.size() <= 4);
  CHECK(summary[0].rfind("Thread 1 ", 0) == 0);
  // gdb detached: the process runs on (sleeping, not stopped).
  CHECK(eventually([&] { return runsOn(sleeper.pid()); }, 2s, {&sleeper}));
  CHECK_FALSE(sleeper.wait(0ms).has_value());
}

TEST_CASE("hang evidence: a debugger over its budget is killed and the process is not left stopped",
          "[hang_evidence][gdb]") {
  if (!haveGdb()) {
    WARN("no " << kGdb << ": the debugger budget is not tested");
    return;
  }
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));
  // Budgets from "before gdb starts" to "in the middle of attaching or reading symbols".
  for (const int budget : {1, 10, 40, 80, 150, 250}) {
    EvidenceOptions options;
    options.debugger = kGdb;
    options.debuggerBudget = std::chrono::milliseconds(budget);
    const auto start = Clock::now();
    const HangEvidence evidence = collectHangEvidence(sleeper.pid(), options);
    const long long took = msSince(start);
    INFO("budget " << budget << " ms, took " << took << " ms\n" << evidence.text());
    CHECK(took < budget + 5000);
    if (evidence.nativeStack.empty()) {
      bool said = false;
      for (const auto& note : evidence.notes)
        said = said || note.find("native stack") != std::string::npos;
      CHECK(said);
    }
    CHECK(eventually([&] { return runsOn(sleeper.pid()); }, 2s, {&sleeper}));
  }
  CHECK_FALSE(sleeper.wait(0ms).has_value());
}

TEST_CASE("hang evidence: eu-stack names the function a native process blocks in, and it runs on",
          "[hang_evidence][eu-stack]") {
  if (!haveEuStack()) {
    WARN("no " << kEuStack << " (Debian: elfutils): the eu-stack native stack is not tested");
    return;
  }
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));

  EvidenceOptions options;
  options.debugger = kEuStack;
  options.debuggerBudget = 30000ms;
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(sleeper.pid(), options);
  const long long took = msSince(start);
  std::printf("hang_evidence_test: eu-stack backtrace of /bin/sleep collected in %lld ms\n", took);
  INFO(evidence.text());
  CHECK(evidence.nativeStack.find("nanosleep") != std::string::npos);
  // Only its thread headers and frames are kept ("PID n - process" is not).
  CHECK(evidence.nativeStack.rfind(fmt::format("TID {}:", sleeper.pid()), 0) == 0);
  CHECK(evidence.nativeStack.find("- process") == std::string::npos);
  const auto summary = evidence.summary(4);
  REQUIRE(!summary.empty());
  CHECK(summary[0] == fmt::format("TID {}:", sleeper.pid()));
  CHECK(evidence.text().find(fmt::format("\nTID {}:\n#0 ", sleeper.pid())) != std::string::npos);
  CHECK(eventually([&] { return runsOn(sleeper.pid()); }, 2s, {&sleeper}));
  CHECK_FALSE(sleeper.wait(0ms).has_value());
}

TEST_CASE("hang evidence: eu-stack or gdb by the tool's name, with the arguments of each",
          "[hang_evidence]") {
  CHECK(nativeStackTool("/usr/bin/eu-stack") == NativeStackTool::kEuStack);
  CHECK(nativeStackTool("eu-stack") == NativeStackTool::kEuStack);
  CHECK(nativeStackTool("/usr/bin/gdb") == NativeStackTool::kGdb);
  CHECK(nativeStackTool("/opt/eu-stack-wrapper") == NativeStackTool::kGdb);
  CHECK(nativeStackCommand("/usr/bin/eu-stack", 42) ==
        std::vector<std::string>{"/usr/bin/eu-stack", "-m", "-p", "42"});
  const auto gdb = nativeStackCommand("/usr/bin/gdb", 42);
  REQUIRE(gdb.size() >= 3);
  CHECK(gdb[1] == "-p");
  CHECK(gdb[2] == "42");
  CHECK(gdb.back() == "thread apply all bt");
  CHECK(isNativeThreadHeader("TID 42:"));
  CHECK(isNativeThreadHeader("Thread 1 (Thread 0x7f (LWP 42) \"python3\"):"));
  CHECK_FALSE(isNativeThreadHeader("#0  0x00007f00ea030503 clock_nanosleep"));
  CHECK_FALSE(isNativeThreadHeader("PID 42 - process"));
}

// A native stack that cannot be got in time (an unwinder that never answers) is said in the
// evidence, with the option that waits longer, and does not hold up the collection: it returns at
// the budget (with a generous bound for a loaded machine), the unwinder killed.
TEST_CASE("hang evidence: the native stack budget is honoured and what it cut short is said",
          "[hang_evidence]") {
  TempDir dir;
  const std::string slow = dir.path + "/slow-unwinder";
  const std::string pidFile = dir.path + "/unwinder.pid";
  writeFile(slow, fmt::format("#!/bin/sh\necho $$ > '{}'\nexec sleep 60\n", pidFile));
  REQUIRE(::chmod(slow.c_str(), 0755) == 0);
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));

  EvidenceOptions options;
  options.debugger = slow;
  options.debuggerBudget = 300ms;
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(sleeper.pid(), options);
  const long long took = msSince(start);
  INFO("took " << took << " ms\n" << evidence.text());
  CHECK(took >= 300);
  CHECK(took < 300 + 5000);  // not the unwinder's 60 s
  CHECK(evidence.nativeStack.empty());
  bool said = false;
  for (const auto& note : evidence.notes) {
    said = said || (note.find("native stack: not collected within 0.3 s") != std::string::npos &&
                    note.find("--hang-native-stack-budget") != std::string::npos);
  }
  CHECK(said);
  CHECK(evidence.text().find("not collected within 0.3 s") != std::string::npos);
  // The unwinder (its whole group) was killed: no 60 s sleep left behind.
  const std::string pidText = readFile(pidFile);
  REQUIRE(!pidText.empty());
  const pid_t unwinder = static_cast<pid_t>(std::stol(pidText));
  CHECK(eventually([&] { return ::kill(unwinder, 0) != 0; }, 5s, {&sleeper}));
  CHECK(runsOn(sleeper.pid()));
}

TEST_CASE("hang evidence: with no debugger and no hook, the kernel's view alone",
          "[hang_evidence]") {
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));
  const HangEvidence evidence = collectHangEvidence(sleeper.pid(), EvidenceOptions{});
  INFO(evidence.text());
  CHECK(evidence.nativeStack.empty());
  CHECK(evidence.pythonStack.empty());
  REQUIRE(evidence.threads.size() == 1);
  CHECK(evidence.threads[0].state == 'S');
  const auto summary = evidence.summary(3);
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].rfind(fmt::format("tid {} sleep S ", sleeper.pid()), 0) == 0);
  const std::string text = evidence.text();
  CHECK(text.find("Threads (1)") != std::string::npos);
  CHECK(text.find("Python stacks") != std::string::npos);
  CHECK(text.find("Native stacks") != std::string::npos);
  CHECK(runsOn(sleeper.pid()));
}

TEST_CASE("hang evidence: a stale stack file of a process without the hook: no signal is sent",
          "[hang_evidence][python]") {
  // The hook's signal is a real-time one: its default action kills. A process that does not
  // catch it (a native worker whose pid once belonged to a Python one) must not receive it.
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  Subprocess sleeper({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(sleeper.pid()); }, 10s, {&sleeper}));

  const HangEvidence noFile = collectHangEvidence(sleeper.pid(), pythonOptions(hook));
  INFO(noFile.text());
  CHECK(noFile.pythonStack.empty());
  REQUIRE(noFile.notes.size() >= 1);

  writeFile(fmt::format("{}/{}.txt", hook.stackDir, sleeper.pid()), "");
  const HangEvidence stale = collectHangEvidence(sleeper.pid(), pythonOptions(hook));
  INFO(stale.text());
  CHECK(stale.pythonStack.empty());
  bool said = false;
  for (const auto& note : stale.notes)
    said = said || note.find("does not catch signal") != std::string::npos;
  CHECK(said);
  std::this_thread::sleep_for(100ms);
  CHECK(runsOn(sleeper.pid()));
  CHECK_FALSE(sleeper.wait(0ms).has_value());
}

TEST_CASE("hang evidence: a process that does not exist gives notes, not an exception",
          "[hang_evidence]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  EvidenceOptions options = pythonOptions(hook);
  options.debugger = agentUnwinder();
  // Above pid_max: no process has it.
  long pidMax = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pidMax;
  const pid_t missing = static_cast<pid_t>(pidMax + 1);
  HangEvidence evidence;
  REQUIRE_NOTHROW(evidence = collectHangEvidence(missing, options));
  INFO(evidence.text());
  CHECK(evidence.pid == missing);
  CHECK(evidence.threads.empty());
  CHECK(evidence.pythonStack.empty());
  CHECK(evidence.nativeStack.empty());
  REQUIRE(evidence.notes.size() == 1);
  CHECK(evidence.notes[0].find("does not exist") != std::string::npos);
  CHECK(evidence.summary(5) == std::vector<std::string>{evidence.notes[0]});

  // Ids that kill() reads as a group or everyone are refused before anything is sent.
  for (const pid_t invalid : {0, -1}) {
    const HangEvidence refused = collectHangEvidence(invalid, EvidenceOptions{});
    INFO(refused.text());
    REQUIRE(refused.notes.size() == 1);
    CHECK(refused.notes[0].find("not a valid process id") != std::string::npos);
  }
}

TEST_CASE(
    "python stack hook: the sitecustomize it shadows still runs, once, and the hook is active",
    "[python_stack_hook]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  const std::string probe = dir.path + "/probe.py";
  writeFile(probe, kProbeScript);
  const std::string other = dir.path + "/other";
  writeFile(other + "/sitecustomize.py", kOtherSiteCustomize);

  SECTION("another sitecustomize further on PYTHONPATH") {
    const auto environment = hookEnvironment(hook, other);
    const std::string output = runProbe(probe, hook.pythonPath, environment);
    INFO(output);
    CHECK(countOf(output, "OTHER-SITECUSTOMIZE-RAN") == 1);
    CHECK(output.find("sitecustomize-file " + other + "/sitecustomize.py\n") != std::string::npos);
    CHECK(output.find("hook-active True\n") != std::string::npos);
    CHECK(output.find("faulthandler-enabled True\n") != std::string::npos);
    CHECK(output.find("hook-dir-on-sys-path False\n") != std::string::npos);
    CHECK(output.find("other-ran 1\n") != std::string::npos);
    // Its stack file is there (named by its pid).
    const auto at = output.find("pid ");
    REQUIRE(at != std::string::npos);
    const std::string pid = output.substr(at + 4, output.find('\n', at) - at - 4);
    CHECK(fs::exists(hook.stackDir + "/" + pid + ".txt"));
  }
  SECTION("none on PYTHONPATH: the system's (Debian's) loads as it would without the hook") {
    Subprocess plain({kPython, "-c",
                      "import sys\ntry:\n import sitecustomize; print(sitecustomize.__file__)\n"
                      "except ImportError:\n print('none')"},
                     {"PYTHONPATH="});
    REQUIRE(plain.wait(30s).has_value());
    const std::string expected = plain.output();
    const std::string output = runProbe(probe, hook.pythonPath, hookEnvironment(hook, ""));
    INFO("without the hook: " << expected << output);
    if (expected == "none\n") {
      CHECK(output.find("sitecustomize-file " + hook.pythonPath + "/sitecustomize.py\n") !=
            std::string::npos);
    } else {
      CHECK(output.find("sitecustomize-file " + expected) != std::string::npos);
    }
    CHECK(output.find("hook-active True\n") != std::string::npos);
    CHECK(output.find("hook-dir-on-sys-path False\n") != std::string::npos);
  }
  SECTION(
      "a shadowed sitecustomize that raises is reported as site.py would, and the worker runs") {
    writeFile(other + "/sitecustomize.py", "raise RuntimeError('broken site hook')\n");
    std::string errors;
    const std::string output =
        runProbe(probe, hook.pythonPath, hookEnvironment(hook, other), &errors);
    INFO(output << errors);
    CHECK(errors.find("Error in sitecustomize") != std::string::npos);
    CHECK(errors.find("RuntimeError: broken site hook") != std::string::npos);
    CHECK(output.find("hook-active True\n") != std::string::npos);
  }
  SECTION("two hooks on the path (a ddprun under a ddprun): installed once, the chain goes on") {
    const PythonStackHook outer = installPythonStackHook(dir.path + "/outer");
    auto environment = hookEnvironment(hook, outer.pythonPath + ":" + other);
    const std::string output = runProbe(probe, hook.pythonPath, environment);
    INFO(output);
    CHECK(countOf(output, "OTHER-SITECUSTOMIZE-RAN") == 1);
    CHECK(output.find("hook-active True\n") != std::string::npos);
    CHECK(output.find("sitecustomize-file " + other + "/sitecustomize.py\n") != std::string::npos);
  }
  SECTION("the torch 2 chroot's site hook (scripts/torch2-site) still runs behind it") {
    const std::string torch2Site = std::string(DDPRUN_SOURCE_DIR) + "/scripts/torch2-site";
    const auto environment = hookEnvironment(hook, torch2Site, {"USE_LIBUV=0"});
    const std::string output = runProbe(probe, hook.pythonPath, environment);
    INFO(output);
    CHECK(output.find("libuv-patch True\n") != std::string::npos);
    CHECK(output.find("hook-active True\n") != std::string::npos);
    CHECK(output.find("hook-dir-on-sys-path False\n") != std::string::npos);
  }
  SECTION("under scripts/torch2-python (torch 2.6 chroot, its site hook first on the path)") {
    Subprocess probeRun({DDPRUN_TORCH2_PYTHON, probe, hook.pythonPath}, hookEnvironment(hook, ""));
    const auto status = probeRun.wait(60s);
    INFO(probeRun.describe());
    REQUIRE(status.has_value());
    if (*status == 77) {
      WARN("no torch 2 chroot (scripts/torch2-python exited 77): not tested under it");
      return;
    }
    REQUIRE(*status == 0);
    const std::string output = probeRun.output();
    CHECK(output.find("libuv-patch True\n") != std::string::npos);
    CHECK(output.find("hook-active True\n") != std::string::npos);
    const auto at = output.find("pid ");
    REQUIRE(at != std::string::npos);
    const std::string pid = output.substr(at + 4, output.find('\n', at) - at - 4);
    CHECK(fs::exists(hook.stackDir + "/" + pid + ".txt"));
  }
}

TEST_CASE("python stack hook: a forked child dumps into its own <pid>.txt", "[python_stack_hook]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  writeFile(dir.path + "/fork.py", R"PY(
import os, time

def child_stuck_after_fork(parent):
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)

def parent_waits_for_child(child):
    print("child", child, flush=True)
    os.waitpid(child, 0)

parent = os.getpid()
child = os.fork()
if child == 0:
    child_stuck_after_fork(parent)
else:
    parent_waits_for_child(child)
)PY");
  Subprocess worker({kPython, dir.path + "/fork.py"}, hookEnvironment(hook));
  const auto line = worker.readLine(20s);
  INFO(worker.describe());
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("child ", 0) == 0);
  const pid_t child = static_cast<pid_t>(std::stol(line->substr(6)));
  const std::string childFile = fmt::format("{}/{}.txt", hook.stackDir, child);
  const std::string parentFile = fmt::format("{}/{}.txt", hook.stackDir, worker.pid());
  REQUIRE(eventually([&] { return fs::exists(childFile); }, 10s, {&worker}));
  // The hook creates the file a moment before it registers faulthandler on it: until then a
  // signal dumps into the parent's file. Asleep in its loop, the child is past the fork hook.
  REQUIRE(eventually([&] { return asleep(child); }, 10s, {&worker}));

  const HangEvidence childEvidence = collectHangEvidence(child, pythonOptions(hook));
  INFO(childEvidence.text());
  CHECK(childEvidence.pythonStack.find("child_stuck_after_fork") != std::string::npos);
  CHECK(childEvidence.pythonStack.find("parent_waits_for_child") == std::string::npos);
  CHECK(readFile(childFile).find("child_stuck_after_fork") != std::string::npos);
  CHECK(readFile(parentFile).find("child_stuck_after_fork") == std::string::npos);

  const HangEvidence parentEvidence = collectHangEvidence(worker.pid(), pythonOptions(hook));
  INFO(parentEvidence.text());
  CHECK(parentEvidence.pythonStack.find("parent_waits_for_child") != std::string::npos);
  CHECK(readFile(childFile).find("parent_waits_for_child") == std::string::npos);
  CHECK(runsOn(child));
  CHECK(runsOn(worker.pid()));
}

TEST_CASE("hang evidence: the threaded collector posts the evidence to the loop",
          "[hang_evidence]") {
  TempDir dir;
  const PythonStackHook hook = installPythonStackHook(dir.path + "/hook");
  writeFile(dir.path + "/stuck.py", kStuckScript);
  Subprocess worker({kPython, dir.path + "/stuck.py"}, hookEnvironment(hook));
  REQUIRE(becomesReady(worker));
  ManualEventLoop loop;
  std::optional<HangEvidence> got;

  const std::string saveTo = dir.path + "/attempt_0/0/stacks.txt";
  SECTION("the result arrives through post(), its text written to the file asked for") {
    auto collector = makeThreadedEvidenceCollector(loop, pythonOptions(hook));
    collector->collect(worker.pid(), saveTo, std::nullopt,
                       [&](HangEvidence evidence) { got = std::move(evidence); });
    CHECK_FALSE(got.has_value());  // not before the loop runs it
    REQUIRE(loop.runUntil([&] { return got.has_value(); }, 20s));
    INFO(got->text());
    CHECK(got->pid == worker.pid());
    CHECK(got->pythonStack.find("stuck_in_the_middle") != std::string::npos);
    CHECK(got->savedTo == saveTo);
    CHECK(readFile(saveTo) == got->text());
  }
  SECTION("destroying the collector waits for the collection in flight") {
    {
      auto collector = makeThreadedEvidenceCollector(loop, pythonOptions(hook));
      collector->collect(worker.pid(), saveTo, std::nullopt,
                         [&](HangEvidence evidence) { got = std::move(evidence); });
    }
    CHECK_FALSE(got.has_value());
    loop.runPosted();
    REQUIRE(got.has_value());
    INFO(got->text());
    CHECK(got->pythonStack.find("stuck_in_the_middle") != std::string::npos);
  }
  CHECK(runsOn(worker.pid()));
}

// Ranks found hung at once are recorded at once: each collection runs on its own thread, so two
// unwinders that use their whole budget (2 s each) take about one budget, not two. The bound
// (3.5 s, where one after the other would take 4 s) leaves 1.5 s for a loaded machine.
TEST_CASE(
    "hang evidence: two hung workers' evidence is collected in parallel, each within the budget",
    "[hang_evidence]") {
  TempDir dir;
  const std::string slow = dir.path + "/slow-unwinder";
  writeFile(slow, "#!/bin/sh\nexec sleep 60\n");
  REQUIRE(::chmod(slow.c_str(), 0755) == 0);
  Subprocess first({"/bin/sleep", "3600"});
  Subprocess second({"/bin/sleep", "3600"});
  REQUIRE(eventually([&] { return asleep(first.pid()) && asleep(second.pid()); }, 10s,
                     {&first, &second}));

  ManualEventLoop loop;
  EvidenceOptions options;
  options.debugger = slow;
  options.debuggerBudget = 2000ms;
  auto collector = makeThreadedEvidenceCollector(loop, options);
  std::vector<HangEvidence> got;
  const auto start = Clock::now();
  for (const pid_t pid : {first.pid(), second.pid()}) {
    collector->collect(pid, fmt::format("{}/stacks_{}.txt", dir.path, pid), std::nullopt,
                       [&](HangEvidence evidence) { got.push_back(std::move(evidence)); });
  }
  REQUIRE(loop.runUntil([&] { return got.size() == 2; }, 30s));
  const long long took = msSince(start);
  INFO("took " << took << " ms\n" << got[0].text() << got[1].text());
  CHECK(took >= 2000);
  CHECK(took < 3500);
  for (const HangEvidence& evidence : got) {
    CHECK(evidence.text().find("native stack: not collected within 2 s") != std::string::npos);
    CHECK(evidence.threads.size() == 1);
  }
  CHECK(runsOn(first.pid()));
  CHECK(runsOn(second.pid()));
}

TEST_CASE("hang evidence: the summary fits its lines and starts with the main thread",
          "[hang_evidence]") {
  HangEvidence evidence;
  evidence.pid = 42;
  evidence.pythonStack =
      "Thread 0x00007f0000000002 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
      "  File \"/w/train.py\", line 9 in loader_thread\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
      "\n"
      "Current thread 0x00007f0000000001 (most recent call first):\n"
      "  File \"/w/train.py\", line 20 in all_reduce_forever\n"
      "  File \"/w/train.py\", line 30 in train_step\n"
      "  File \"/w/train.py\", line 40 in <module>\n";
  const auto all = evidence.summary(100);
  CHECK(all.size() == 8);
  CHECK(all[0].rfind("Current thread", 0) == 0);
  const auto three = evidence.summary(3);
  REQUIRE(three.size() == 3);
  CHECK(three[1].find("all_reduce_forever") != std::string::npos);
  CHECK(three[2].find("more thread") != std::string::npos);
  const auto five = evidence.summary(5);
  REQUIRE(five.size() == 5);
  CHECK(five[0].rfind("Current thread", 0) == 0);
  CHECK(five[1].find("all_reduce_forever") != std::string::npos);
  CHECK(five[2].find("train_step") != std::string::npos);
  CHECK(five[3].rfind("Thread 0x", 0) == 0);
  CHECK(five[4].find("wait") != std::string::npos);
  CHECK(evidence.summary(1).size() == 1);
  CHECK(evidence.summary(0).empty());
}

TEST_CASE("hang evidence: gdb on a Python process that imported torch (timing)",
          "[.][hang_evidence][gdb][timing]") {
  if (!haveGdb()) return;
  Subprocess worker({kPython, "-c",
                     "import torch, time\na = torch.ones(300, 300); (a @ a).sum()\n"
                     "print('ready', flush=True)\ntime.sleep(100)"});
  REQUIRE(becomesReady(worker, 90s));
  EvidenceOptions options;
  options.debugger = kGdb;
  options.debuggerBudget = 60000ms;
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(worker.pid(), options);
  std::printf(
      "hang_evidence_test: gdb backtrace of a torch-importing Python process (%zu threads) "
      "collected in %lld ms\n",
      evidence.threads.size(), msSince(start));
  INFO(evidence.text());
  CHECK(evidence.nativeStack.find("nanosleep") != std::string::npos);
  CHECK(eventually([&] { return runsOn(worker.pid()); }, 2s, {&worker}));
}

TEST_CASE("hang evidence: eu-stack on a Python process that imported torch (timing)",
          "[.][hang_evidence][eu-stack][timing]") {
  if (!haveEuStack()) return;
  Subprocess worker({kPython, "-c",
                     "import torch, time\na = torch.ones(300, 300); (a @ a).sum()\n"
                     "print('ready', flush=True)\ntime.sleep(100)"});
  REQUIRE(becomesReady(worker, 90s));
  EvidenceOptions options;
  options.debugger = kEuStack;
  options.debuggerBudget = 60000ms;
  const auto start = Clock::now();
  const HangEvidence evidence = collectHangEvidence(worker.pid(), options);
  std::printf(
      "hang_evidence_test: eu-stack backtrace of a torch-importing Python process (%zu "
      "threads) collected in %lld ms\n",
      evidence.threads.size(), msSince(start));
  INFO(evidence.text());
  CHECK(evidence.nativeStack.find("nanosleep") != std::string::npos);
  CHECK(eventually([&] { return runsOn(worker.pid()); }, 2s, {&worker}));
}
