// The hint for a job that died for want of a Python module: which interpreter ran the workers,
// where ddprun took it from (PATH or PYTHON_EXEC), and what to set. Decided on the root cause's
// own evidence (its stderr tail or error file names the missing module), never on every worker
// agreeing: the first failure stops the others before they print theirs.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "core/worker_failure.h"

namespace ddprun::launcher {

// Where the workers' interpreter came from.
struct Interpreter {
  std::string path;             // as run: $PYTHON_EXEC resolved, or the first python3 on PATH
  bool fromPythonExec = false;  // PYTHON_EXEC chose it
};

// The "ModuleNotFoundError: No module named 'x'" line the failure's stderr tail ends its
// traceback with, or its error file's message holds; nothing otherwise.
std::optional<std::string> missingModuleLine(const WorkerFailure& failure);

// For a failure whose output ddprun did not see (one worker per node writes to the console
// itself): the first module `script` imports at its top level that `interpreter` cannot find,
// asked of that interpreter (its import system's find_spec, nothing of the script run; tens of
// milliseconds). Nothing when every module is found or the question cannot be asked.
std::optional<std::string> unimportableModule(
    const Interpreter& interpreter, const std::string& script,
    const std::map<std::string, std::string>& environment,
    std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The hint's text (no "ddprun: hint: " prefix). `evidence`: what the worker said
// ("failed with ...") or what the interpreter said ("imports torch, which ... cannot find").
std::string interpreterHint(const std::string& evidence, const Interpreter& interpreter);

}  // namespace ddprun::launcher
