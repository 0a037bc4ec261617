// What the collectors of a hung worker's evidence (hang_evidence.h) share: the three collectors,
// each adding what it found, or a note saying why not, to one HangEvidence, and the small readers
// of /proc and of text they all use. Internal to hang/.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hang/hang_evidence.h"

namespace ddprun::launcher::evidence {

using Clock = std::chrono::steady_clock;

// The kernel's view of each thread (evidence_kernel.cc).
void collectThreads(pid_t pid, HangEvidence& evidence);
// The Python stack, from the stack hook (evidence_python.cc).
void collectPythonStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence);
// The debugger's backtrace of every thread (evidence_native.cc).
void collectNativeStack(pid_t pid, const EvidenceOptions& options, HangEvidence& evidence);

std::string errorText(int error);
long long elapsedMs(Clock::time_point since);
// A /proc file's text (anything past 1 MiB is not worth keeping), or nothing with `why` set.
std::optional<std::string> readSmallFile(const std::string& path, std::string* why = nullptr);
// `text` without leading and trailing white space.
std::string trimmed(std::string text);
// `text`'s lines, without their ends ("\n" or "\r\n").
std::vector<std::string> splitLines(const std::string& text);
// The process's state letter (R, S, D, T, Z...), '?' when /proc/<pid>/stat is not readable.
char processState(pid_t pid);
bool isStopped(char state);

}  // namespace ddprun::launcher::evidence
