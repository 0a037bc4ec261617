// What runs: the training script, module or executable, its arguments, and the interpreter.
#include "cli/entry_point.h"

#include <fmt/format.h>

#include <filesystem>
#include <initializer_list>
#include <string_view>

#include "cli/cli.h"
#include "cli/helpers.h"
#include "cli/host_probes.h"
#include "core/file_text.h"
#include "ddprun/common/path_lookup.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher::cli_detail {

std::string resolvePython(const Environment& environment) {
  const std::string* pythonExec = lookup(environment, "PYTHON_EXEC");
  if (pythonExec != nullptr && !pythonExec->empty()) {  // an empty PYTHON_EXEC counts as unset
    if (pythonExec->find('/') != std::string::npos) {
      if (!common::isExecutableFile(*pythonExec)) {
        throw UsageError(
            fmt::format("PYTHON_EXEC {} is not an executable file; point it at a "
                        "Python interpreter or unset it",
                        quote(*pythonExec)));
      }
      return *pythonExec;
    }
    if (const auto found = common::findExecutable(*pythonExec, environment)) {
      return absolutePath(*found);
    }
    throw UsageError(
        fmt::format("PYTHON_EXEC {} is not found on PATH; give the interpreter's full "
                    "path or unset it",
                    quote(*pythonExec)));
  }
  // Not canonicalised: a virtualenv's python is a symlink that must keep its own path.
  if (const auto found = common::findExecutable("python3", environment)) {
    return absolutePath(*found);
  }
  throw UsageError(
      "no python3 on PATH and PYTHON_EXEC is not set; install Python 3, set "
      "PYTHON_EXEC=/path/to/python, or run an executable with --no-python");
}

namespace {

using common::printable;

std::string missingScriptMessage(const std::string& script) {
  std::error_code error;
  const auto cwd = std::filesystem::current_path(error);
  const bool mayBeCommand = script.find('/') == std::string::npos && !script.ends_with(".py");
  return fmt::format("training script {} does not exist (relative to {}){}; check the path",
                     quote(script), quote(error ? std::string("?") : cwd.string()),
                     mayBeCommand ? " and is not a command on PATH" : "");
}

// --no-python: exec'd as given; a bare name is looked up on PATH only, as execvp does.
std::string resolveExplicitExecutable(const std::string& script, const GivenValue& noPython,
                                      const Environment& environment) {
  if (script.find('/') == std::string::npos) {
    if (const auto found = common::findExecutable(script, environment)) return *found;
    if (common::isExecutableFile(script)) {
      throw UsageError(
          fmt::format("{}: {} is not on PATH; to run the file in the working directory write ./{}",
                      printable(noPython.origin), quote(script), printable(script)));
    }
    if (pathExists(script)) {
      throw UsageError(
          fmt::format("{}: {} is not on PATH, and the file of that name here is not "
                      "executable; chmod +x it and write ./{}, or drop {}",
                      printable(noPython.origin), quote(script), printable(script),
                      printable(noPython.origin)));
    }
    throw UsageError(fmt::format("{}: {} is not found on PATH; give its path, e.g. ./{}",
                                 printable(noPython.origin), quote(script), printable(script)));
  }
  if (!pathExists(script)) throw UsageError(missingScriptMessage(script));
  if (isDirectory(script)) {
    throw UsageError(
        fmt::format("{}: {} is a directory, not an executable; give the program's path",
                    printable(noPython.origin), quote(script)));
  }
  if (!common::isExecutableFile(script)) {
    throw UsageError(fmt::format("{}: {} is not executable; chmod +x it or drop {}",
                                 printable(noPython.origin), quote(script),
                                 printable(noPython.origin)));
  }
  return script;
}

// What a file that is not executable is meant for, from its first bytes: a program or a script
// of another language ("a program", "a /bin/sh script"), or nothing when it may be Python.
std::optional<std::string> notPythonKind(const std::string& path) {
  constexpr std::size_t kHead = 256;
  std::string head = readFileText(path, nullptr, kHead).value_or("");
  head.resize(std::min(head.size(), kHead));
  if (head.starts_with("\x7f"
                       "ELF"))
    return "a program";
  if (head.starts_with("#!")) {
    const std::string interpreter = head.substr(2, head.find('\n') - 2);
    if (interpreter.find("python") == std::string::npos) {
      return fmt::format("a script for {}", std::string(trim(interpreter)));
    }
  }
  return std::nullopt;
}

// What to say about a training script that plainly is not Python (`kind` from notPythonKind):
// the fix is --no-python, and chmod +x as well where the file cannot be executed.
std::string notPythonMessage(const std::string& script, const std::string& where,
                             const std::string& kind, bool executable) {
  return fmt::format(
      "training script {}{} is {}, and every training script runs under Python unless "
      "--no-python is given, as with torchrun; run it with --no-python{}",
      quote(script), where, kind, executable ? "" : " (and chmod +x it)");
}

// No flag: torchrun's rule. Every training script runs as `$PYTHON_EXEC -u script` whatever
// its suffix or shebang, so that a console-script style `train` (#!/usr/bin/env python3) gets
// the job's interpreter and unbuffered output rather than the first python3 on PATH. Where
// torchrun would hand Python a file that plainly is not Python (a program, a script for another
// interpreter) and every rank would die of a SyntaxError, the command line stops with one line
// naming --no-python. A bare name that is no file here but a Python script on PATH runs under
// Python from there (torchrun cannot open it).
void detectEntry(LaunchConfig& config, const Environment& environment) {
  const std::string& script = config.entry.script;
  const bool bareName = script.find('/') == std::string::npos;
  config.entry.kind = EntryKind::kPythonScript;
  if (pathExists(script)) {
    if (isDirectory(script)) {
      if (!pathExists(script + "/__main__.py")) {
        throw UsageError(
            fmt::format("training script {} is a directory without __main__.py; give "
                        "the script inside it",
                        quote(script)));
      }
      return;
    }
    if (const auto kind = script.ends_with(".py") ? std::nullopt : notPythonKind(script)) {
      throw UsageError(notPythonMessage(script, "", *kind, common::isExecutableFile(script)));
    }
    return;
  }
  if (bareName && !script.ends_with(".py")) {
    if (const auto found = common::findExecutable(script, environment)) {
      if (const auto kind = notPythonKind(*found)) {
        throw UsageError(notPythonMessage(
            script, fmt::format(" (not a file here; found on PATH as {})", quote(*found)), *kind,
            true));
      }
      config.entry.script = absolutePath(*found);
      return;
    }
  }
  throw UsageError(missingScriptMessage(script));
}

// Takes the training script and its arguments from argv into `entry`.
void takeScriptAndArguments(int argc, const char* const* argv, int scriptIndex, EntryPoint& entry) {
  if (scriptIndex < 0 || scriptIndex >= argc || argv[scriptIndex] == nullptr) {
    throw UsageError("missing the training script: ddprun [options] script.py [args]");
  }
  entry.script = argv[scriptIndex];
  int first = scriptIndex + 1;
  // torchrun's argparse drops a "--" right after the script (`train.py -- --lr 0.1` gives the
  // script ['--lr', '0.1']), unless a "--" before the script already ended the options; a later
  // "--" is the script's own.
  const bool endedBefore = scriptIndex > 1 && argv[scriptIndex - 1] != nullptr &&
                           std::string_view(argv[scriptIndex - 1]) == "--";
  if (!endedBefore && first < argc && argv[first] != nullptr &&
      std::string_view(argv[first]) == "--") {
    ++first;
  }
  for (int i = first; i < argc; ++i) entry.args.emplace_back(argv[i] == nullptr ? "" : argv[i]);
  if (entry.script.empty()) {
    throw UsageError("the training script is an empty string: ddprun [options] script.py [args]");
  }
}

// --run-path: torchrun lets it win over -m and --no-python; say so instead of silently ignoring
// them.
void applyRunPath(const GivenValue& runPath, std::initializer_list<const GivenValue*> others,
                  CommandLine& result) {
  for (const auto* ignored : others) {
    if (ignored != nullptr) {
      result.warnings.push_back(fmt::format("{} is ignored with {}", printable(ignored->origin),
                                            printable(runPath.origin)));
    }
  }
  if (!pathExists(result.config.entry.script)) {
    throw UsageError(missingScriptMessage(result.config.entry.script));
  }
  result.config.entry.kind = EntryKind::kRunPath;
}

}  // namespace

void resolveEntry(const Arguments& arguments, int argc, const char* const* argv, int scriptIndex,
                  const Environment& environment, CommandLine& result) {
  LaunchConfig& config = result.config;
  takeScriptAndArguments(argc, argv, scriptIndex, config.entry);
  const GivenValue* module = arguments.given("module");
  const GivenValue* noPython = arguments.given("no-python");
  if (const GivenValue* runPath = arguments.given("run-path")) {
    applyRunPath(*runPath, {module, noPython}, result);
  } else if (module != nullptr && noPython != nullptr) {
    throw UsageError(
        fmt::format("{} and {} cannot be used together: a module needs Python; drop one of them",
                    printable(module->origin), printable(noPython->origin)));
  } else if (module != nullptr) {
    config.entry.kind = EntryKind::kPythonModule;
  } else if (noPython != nullptr) {
    config.entry.kind = EntryKind::kExecutable;
    config.entry.executable =
        resolveExplicitExecutable(config.entry.script, *noPython, environment);
  } else {
    detectEntry(config, environment);
  }
  if (config.entry.kind == EntryKind::kExecutable) return;
  config.entry.python = resolvePython(environment);
  // torchrun's workers run under the interpreter that runs torchrun; ddprun's under one it chose.
  // Said when it chose by PATH: a python3 first on PATH without the job's packages is the usual
  // reason a job that works under torchrun fails under ddprun.
  const std::string* pythonExec = lookup(environment, "PYTHON_EXEC");
  if (pythonExec == nullptr || pythonExec->empty()) {
    result.interpreterNote = fmt::format(
        "the workers run under {}, the first python3 on PATH; PYTHON_EXEC=/path/to/python "
        "chooses another (torchrun's run under the python that runs torchrun)",
        printable(config.entry.python));
  }
}

}  // namespace ddprun::launcher::cli_detail
