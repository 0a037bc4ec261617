#!/usr/bin/env python3
"""The house's size at a glance: the largest files and functions of the launcher and the
rendezvous module, how many files each folder holds, and how many files are off the checked-in
.clang-format (as scripts/check-format.sh counts them). Read-only; run from the repository root.

    scripts/house_metrics.py [--top N]

A function is found by its body: a '{' that closes a line whose text since the previous ';', '}'
or '{' holds a ')' and is not a control statement, a class, a namespace, an enum or a lambda
opened inside an expression. Good enough to rank, not a parser.
"""
import argparse
import collections
import os
import re
import subprocess

MODULES = ("launcher", "rendezvous")
NOT_FUNCTIONS = re.compile(r"^\s*(if|for|while|switch|catch|do|else|namespace|class|struct|enum|union|"
                           r"return|case|try)\b")
SIGNATURE_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_:~<>]*)\s*\(")


def production_files(module):
    out = subprocess.run(["git", "ls-files", module], capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if p.endswith((".cc", ".h")) and "/tests/" not in p]


def strip_literals(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def functions(path):
    """(lines, name) of each outermost function body in `path`."""
    found = []
    depth = 0
    stack = []  # (depth at open, start line, name) of the open function, if any
    pending = ""
    in_comment = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, 1):
            line = strip_literals(raw)
            if in_comment:
                if "*/" not in line:
                    continue
                line = line.split("*/", 1)[1]
                in_comment = False
            line = re.sub(r"/\*.*?\*/", "", line)
            if "/*" in line:
                line, in_comment = line.split("/*", 1)[0], True
            if line.lstrip().startswith("#"):
                continue
            for ch in line:
                if ch == "{":
                    head = pending.strip()
                    is_function = (not stack and ")" in head and not NOT_FUNCTIONS.match(head)
                                   and not head.endswith(("=", ",", "(")) and "[" not in head.split("(")[0]
                                   and not re.search(r"\]\s*\(.*\)\s*(mutable\s*)?(->.*)?$", head))
                    if is_function:
                        names = SIGNATURE_NAME.findall(head)
                        stack.append((depth, number, names[0] if names else head[:40]))
                    depth += 1
                    pending = ""
                elif ch == "}":
                    depth -= 1
                    if stack and stack[-1][0] == depth:
                        _, start, name = stack.pop()
                        found.append((number - start + 1, name))
                    pending = ""
                elif ch == ";":
                    pending = ""
                else:
                    pending += ch
            pending += " "
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    for module in MODULES:
        files = production_files(module)
        sizes = sorted(((sum(1 for _ in open(p, encoding="utf-8", errors="replace")), p) for p in files),
                       reverse=True)
        print("## %s: %d files, %d lines" % (module, len(files), sum(n for n, _ in sizes)))
        print("largest files:")
        for n, p in sizes[:args.top]:
            print("  %5d  %s" % (n, p))
        bodies = sorted(((n, name, p) for p in files if p.endswith(".cc") for n, name in functions(p)),
                        reverse=True)
        print("largest functions:")
        for n, name, p in bodies[:args.top]:
            print("  %5d  %s (%s)" % (n, name, p))
        print("functions over 60 lines: %d; files over 500 lines: %d" %
              (sum(1 for n, _, _ in bodies if n > 60), sum(1 for n, _ in sizes if n > 500)))
        folders = collections.Counter(os.path.dirname(p) for p in files)
        print("files per folder:")
        for folder, count in sorted(folders.items()):
            print("  %3d  %s" % (count, folder))
    # The drift as scripts/check-format.sh counts it (one rule for which files and how).
    check = subprocess.run(["scripts/check-format.sh"], capture_output=True, text=True)
    counts = re.search(r"(\d+) of (\d+) C\+\+ files are off", check.stderr)
    every = re.search(r"all (\d+) C\+\+ files follow", check.stdout)
    off, total = (counts.group(1), counts.group(2)) if counts else ("0", every.group(1) if every else "?")
    print("## clang-format drift: %s of %s C++ files off .clang-format" % (off, total))

if __name__ == "__main__":
    main()
