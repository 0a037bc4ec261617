// The Python stack hook: a sitecustomize.py that ddprun writes into its private directory and puts
// first on the workers' PYTHONPATH. In a Python worker it registers faulthandler for one signal
// (writing every thread's stack into "<stackDir>/<pid>.txt", so the agent can ask a hung worker
// where it is without killing it) and enables faulthandler for fatal signals (a segfault prints
// the Python stacks on stderr); then it loads the sitecustomize it shadows, so a site's or a
// chroot's own sitecustomize still runs. A deliberate difference from torchrun's environment,
// documented in docs/env_contract.md.
#pragma once

#include <map>
#include <string>

namespace ddprun::launcher {

struct PythonStackHook {
  std::string pythonPath;  // the directory holding sitecustomize.py
  std::string stackDir;    // where dumps go, "<pid>.txt"
  int signal = 0;          // the signal that asks for a dump (a real-time signal)
};

// Writes the hook under `directory` (made if needed; an existing one must be this user's own
// directory, not a link): "<directory>/python/sitecustomize.py", the dumps into `directory`
// itself ("<directory>/<pid>.txt"), which may hold other files of the agent's. Throws
// std::system_error naming the path.
PythonStackHook installPythonStackHook(const std::string& directory);

// Adds the hook to a worker environment: PYTHONPATH (prepended to what is there),
// DDPRUN_STACK_DIR and DDPRUN_STACK_SIGNAL.
void addPythonStackHook(const PythonStackHook& hook,
                        std::map<std::string, std::string>& environment);

}  // namespace ddprun::launcher
