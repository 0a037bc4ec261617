#!/usr/bin/env python3
"""The launcher's rooms and the direction of their includes (docs/architecture.md, "The launcher's
rooms"): each folder of launcher/src may include only itself and the rooms below it, so the
dependency rule the docs state is checked on every build, not just read.

Usage: layering_test.py SOURCE_DIR   (the repository root)
"""
import pathlib
import re
import sys

# Each room and the rooms it may include (besides itself). core is the ground floor; the wiring
# (agent) is the top; cli stands beside them and only main.cc joins the two (and status, above cli).
# hosts (the launch over ssh) stands beside the agent too: cli builds its plan, main.cc runs it.
ALLOWED = {
    "core": set(),
    "process": {"core"},
    # NUMA binding: the topology read from sysfs and the plan of each worker's CPUs (pure).
    "placement": {"core"},
    "output": {"core"},
    "report": {"core"},
    "hang": {"core"},
    # The health gate before each round: the node's GPUs (NVML), free space, the hooks.
    "health": {"core"},
    # How the job's store is reached and hosted (the store seam, its backends, the hosting
    # policy): below membership, which runs its rounds on a StoreBackend.
    "stores": {"core"},
    "membership": {"core", "stores"},
    "machine": {"core", "process", "hang", "report", "health"},
    "agent": {"core", "process", "output", "report", "hang", "health", "stores", "membership",
              "machine", "placement"},
    "hosts": {"core"},
    "cli": {"core", "hosts"},
    # `ddprun status`: the agent's options (cli) read by the agent's rules, the agent's way to the
    # store (stores), the key layout and snapshots (membership) and the failure's wording (report);
    # main.cc joins it to the subcommand table.
    "status": {"core", "cli", "stores", "membership", "report"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# The launcher's public headers (launcher/include), each in the room its contents belong to: an
# include of one is checked like an include of that room. Other "ddprun/..." paths are the modules
# below the launcher (common, rendezvous), which every room may use.
PUBLIC = {
    "ddprun/launcher/launch_config.h": "core",  # the options every room reads
    "ddprun/launcher/agent.h": "agent",  # runAgent: the wiring's entry point
}
PUBLIC_PREFIX = "ddprun/launcher/"


def room_of(included: str):
    """The room `included` belongs to, "" for a module below the launcher, None for a bare name."""
    if included.startswith(PUBLIC_PREFIX):
        return PUBLIC.get(included, "?")
    if included.startswith("ddprun/"):
        return ""
    return included.split("/", 1)[0] if "/" in included else None


def check(room: str, name: str, text: str, problems: list) -> int:
    """Checks the includes of one file of `room`; returns how many it has."""
    includes = INCLUDE.findall(text)
    for included in includes:
        target = room_of(included)
        if target is None:
            problems.append(f"{name}: #include \"{included}\" names no room "
                            "(write it from launcher/src, e.g. \"core/event_loop.h\")")
        elif target == "?":
            problems.append(f"{name}: #include \"{included}\" is a public header this test does "
                            "not place: add it to PUBLIC with its room")
        elif target in ALLOWED and target != room and target not in ALLOWED.get(room, set()):
            problems.append(f"{name}: #include \"{included}\" points up or sideways ({room} may "
                            f"include {sorted(ALLOWED.get(room, set())) or 'only core'})")
    return len(includes)


def main() -> int:
    root = pathlib.Path(sys.argv[1]) / "launcher" / "src"
    rooms = sorted(p.name for p in root.iterdir() if p.is_dir())
    problems = []
    if set(rooms) != set(ALLOWED):
        problems.append(f"rooms on disk {rooms} differ from the rule's {sorted(ALLOWED)}: update both "
                        "this test and docs/architecture.md")
    loose = sorted(p.name for p in root.iterdir() if p.is_file())
    if loose:
        problems.append(f"files outside any room: {loose}")
    checked = 0
    for room in rooms:
        for source in sorted((root / room).glob("*")):
            checked += check(room, f"{room}/{source.name}", source.read_text(errors="replace"), problems)
    public = root.parent / "include"
    for header in sorted(public.rglob("*.h")):
        included = header.relative_to(public).as_posix()
        room = PUBLIC.get(included)
        if room is None:
            problems.append(f"{included}: a public header this test does not place: add it to PUBLIC")
            continue
        checked += check(room, included, header.read_text(errors="replace"), problems)
    for problem in problems:
        print("layering:", problem)
    print(f"layering: {checked} includes in {len(rooms)} rooms checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
