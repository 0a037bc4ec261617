#include "hang/python_stack_hook.h"

#include <signal.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "ddprun/common/safe_files.h"

namespace ddprun::launcher {

namespace {

// The hook itself. Standard library only, and it never raises: whatever fails is skipped, so a
// broken hook cannot break a worker. It runs at interpreter start-up in every Python process
// that inherits the environment (workers, their DataLoader workers, any Python they start), so
// it imports only what is built in (faulthandler) and does nothing else unless asked.
//
// The chain to the sitecustomize it shadows: site.py runs `import sitecustomize`, which found
// this file first on PYTHONPATH. It takes its own directory off sys.path, drops itself from
// sys.modules and imports `sitecustomize` again, so the next one on the path (a site's, a
// chroot's, Debian's /usr/lib/python3.X/sitecustomize.py) loads, once. The import machinery
// then finishes site.py's import by taking whatever sys.modules holds under the name, which is
// the shadowed module: it is loaded exactly once and is what `import sitecustomize` gives user
// code. If there is none, this module is put back (the import machinery expects to find one).
// Its directory is not put back on sys.path: it holds nothing but this file, and user code sees
// the sys.path it would see without ddprun. PYTHONPATH still names it, so every Python started
// from the worker loads the hook too.
constexpr std::string_view kSiteCustomize =
    R"PY(# Written by ddprun (launcher/src/python_stack_hook.cc): the Python stack hook.
# With DDPRUN_STACK_DIR and DDPRUN_STACK_SIGNAL set, the signal DDPRUN_STACK_SIGNAL makes this
# process write the stack of every thread into DDPRUN_STACK_DIR/<pid>.txt (faulthandler), so
# ddprun can say where a hung worker is before it stops it; a fatal signal (segfault...) prints
# the stacks on stderr, as with PYTHONFAULTHANDLER=1. Then the sitecustomize this file shadows
# on sys.path is loaded, as if this file were not there.


def _ddprun_install_stack_hook():
    import os
    import sys

    if "_ddprun_stack_hook" in sys.modules:
        return  # a second copy of this hook further on the path: installed once per process
    directory = os.environ.get("DDPRUN_STACK_DIR", "")
    signal_text = os.environ.get("DDPRUN_STACK_SIGNAL", "")
    if not directory or not signal_text:
        return
    import faulthandler

    signum = int(signal_text)
    state = type(sys)("_ddprun_stack_hook")
    state.directory = directory
    state.signum = signum
    state.file = None
    sys.modules["_ddprun_stack_hook"] = state

    def register():
        stack_file = None
        try:
            path = os.path.join(directory, "%d.txt" % os.getpid())
            # Never through a link at the name; readable by this user only.
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
            stack_file = open(os.open(path, flags, 0o600), "wb", buffering=0)
            faulthandler.register(signum, file=stack_file, all_threads=True, chain=False)
        except Exception:
            # Not registered (in a forked child: still the parent's file). Unregistered, the
            # signal keeps its default action, and ddprun sends it only to a process that
            # catches it.
            try:
                faulthandler.unregister(signum)
            except Exception:
                pass
            if stack_file is not None:
                try:
                    stack_file.close()
                except Exception:
                    pass
            stack_file = None
        previous, state.file = state.file, stack_file
        if previous is not None:
            try:
                previous.close()  # in a forked child: its copy of the parent's descriptor
            except Exception:
                pass

    def after_fork_in_child():
        try:
            register()
        except Exception:
            pass

    register()
    try:
        if not faulthandler.is_enabled():
            faulthandler.enable(all_threads=True)
    except Exception:
        pass
    try:
        os.register_at_fork(after_in_child=after_fork_in_child)
    except Exception:
        pass


def _ddprun_load_shadowed_sitecustomize():
    import os
    import sys

    this = sys.modules.get("sitecustomize")
    try:
        here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))

        def is_here(entry):
            try:
                return bool(entry) and isinstance(entry, str) and os.path.realpath(entry) == here
            except Exception:
                return False

        sys.path[:] = [entry for entry in sys.path if not is_here(entry)]
        sys.modules.pop("sitecustomize", None)
        try:
            __import__("sitecustomize")
        except ImportError as error:
            if error.name != "sitecustomize":
                _ddprun_report_shadowed_error(error)
        except Exception as error:
            _ddprun_report_shadowed_error(error)
    finally:
        if "sitecustomize" not in sys.modules and this is not None:
            sys.modules["sitecustomize"] = this


def _ddprun_report_shadowed_error(error):
    # What site.py says of a sitecustomize that fails, since this file now imports it.
    try:
        import sys

        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             "%s: %s\n" % (error.__class__.__name__, error))
    except Exception:
        pass


try:
    _ddprun_install_stack_hook()
except Exception:
    pass
try:
    _ddprun_load_shadowed_sitecustomize()
except Exception:
    pass
)PY";

// The hook's directories: made, or ours already (a second install into the same place); a link
// or another user's directory there is refused: the workers run what is written into it.
void makeOwnDirectory(const std::string& path) {
  if (auto problem = common::ensureOwnDirectories(path)) {
    throw std::system_error(problem->code(), "cannot create the directory " + path);
  }
}

// Writes the hook through a new file under a random name and a rename (so a Python starting at
// the same moment reads either the old file or the new one, never half of one, and nothing
// planted at a guessable temporary name is written through). Mode 0600: only the agent's user,
// who runs the workers, reads it.
void writeHook(const std::string& path, std::string_view content) {
  if (auto problem = common::writeFileAtomically(path, content, 0600)) {
    throw std::system_error(problem->code(), "cannot write the Python stack hook " + path);
  }
}

}  // namespace

PythonStackHook installPythonStackHook(const std::string& directory) {
  const std::filesystem::path root = std::filesystem::absolute(directory).lexically_normal();
  PythonStackHook hook;
  // Two directories, not three: the dumps ("<pid>.txt") go into `directory` itself, and only
  // the module directory, which must hold nothing but the hook (it is on every worker's
  // PYTHONPATH), is one of its own: each directory costs a launch a mkdir and a removal
  // (run_directories.h).
  hook.pythonPath = (root / "python").string();
  hook.stackDir = root.string();
  // A real-time signal: SIGUSR1/2 are taken by Slurm, Lightning and others. Its default action
  // terminates, so it is only ever sent to a process that catches it (hang_evidence.cc checks).
  hook.signal = SIGRTMIN + 5;
  if (hook.signal > SIGRTMAX) hook.signal = SIGRTMIN;
  makeOwnDirectory(hook.stackDir);
  makeOwnDirectory(hook.pythonPath);
  writeHook(hook.pythonPath + "/sitecustomize.py", kSiteCustomize);
  return hook;
}

void addPythonStackHook(const PythonStackHook& hook,
                        std::map<std::string, std::string>& environment) {
  std::string& pythonPath = environment["PYTHONPATH"];
  const bool alreadyFirst =
      pythonPath == hook.pythonPath || pythonPath.rfind(hook.pythonPath + ":", 0) == 0;
  if (!alreadyFirst)
    pythonPath = pythonPath.empty() ? hook.pythonPath : hook.pythonPath + ":" + pythonPath;
  environment["DDPRUN_STACK_DIR"] = hook.stackDir;
  environment["DDPRUN_STACK_SIGNAL"] = std::to_string(hook.signal);
}

}  // namespace ddprun::launcher
