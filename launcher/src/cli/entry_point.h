// What runs: the training script (or module, or executable) and its arguments from argv, how it
// is started (EntryKind), and the Python interpreter for the Python modes.
#pragma once

#include "cli/arguments.h"
#include "cli/cli.h"
#include "cli/helpers.h"

namespace ddprun::launcher::cli_detail {

// The interpreter the Python modes run: $PYTHON_EXEC (a path, or a name looked up on PATH), else
// the first python3 on PATH. Throws UsageError naming the fix.
std::string resolvePython(const Environment& environment);

// Fills result.config.entry from argv[scriptIndex...] and -m/--no-python/--run-path: a .py file
// runs under Python; any other executable file runs directly (no --no-python needed); a bare name
// may be a command on PATH. Reads the file system; throws UsageError.
void resolveEntry(const Arguments& arguments, int argc, const char* const* argv, int scriptIndex,
                  const Environment& environment, CommandLine& result);

}  // namespace ddprun::launcher::cli_detail
