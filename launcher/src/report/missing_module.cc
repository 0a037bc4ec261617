#include "report/missing_module.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "core/program_output.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

constexpr std::string_view kMissing = "ModuleNotFoundError: ";

// Prints the first top-level import of the script (argv[1]) that the import system cannot find,
// looked up from the script's directory first, as `python script` does; prints nothing else.
constexpr const char* kProbe =
    "import ast, importlib.util, os, sys\n"
    "script = sys.argv[1]\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(script)))\n"
    "with open(script, 'rb') as f:\n"
    "    tree = ast.parse(f.read(1 << 20))\n"
    "for node in tree.body:\n"
    "    names = []\n"
    "    if isinstance(node, ast.Import):\n"
    "        names = [alias.name for alias in node.names]\n"
    "    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:\n"
    "        names = [node.module]\n"
    "    for name in names:\n"
    "        top = name.split('.')[0]\n"
    "        try:\n"
    "            found = importlib.util.find_spec(top) is not None\n"
    "        except Exception:\n"
    "            found = True\n"
    "        if not found:\n"
    "            print(top)\n"
    "            sys.exit(0)\n";

bool isModuleName(const std::string& name) {
  return !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

std::optional<std::string> missingModuleLine(const WorkerFailure& failure) {
  const auto last =
      std::find_if(failure.stderrTail.rbegin(), failure.stderrTail.rend(),
                   [](const std::string& line) { return line.starts_with(kMissing); });
  if (last != failure.stderrTail.rend()) return *last;
  if (failure.message.starts_with(kMissing)) {
    const std::size_t end = failure.message.find('\n');
    return failure.message.substr(0, end);
  }
  return std::nullopt;
}

std::optional<std::string> unimportableModule(const Interpreter& interpreter,
                                              const std::string& script,
                                              const std::map<std::string, std::string>& environment,
                                              std::chrono::milliseconds timeout) {
  auto name = programOutput({interpreter.path, "-c", kProbe, script}, environment, timeout, 256);
  if (!name || !isModuleName(*name)) return std::nullopt;
  return name;
}

std::string interpreterHint(const std::string& evidence, const Interpreter& interpreter) {
  return common::printable(evidence) + " under " + common::printable(interpreter.path) + " (" +
         (interpreter.fromPythonExec ? "set by PYTHON_EXEC" : "the first python3 on PATH") +
         "); if another interpreter has it, choose it with PYTHON_EXEC=/path/to/python";
}

}  // namespace ddprun::launcher
