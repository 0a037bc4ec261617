"""`--json PATH` for every bench_*.py: the tables a bench prints, as one JSON document that
scripts/plot_benchmarks.py draws (scripts/bench.sh writes them to bench-results/<name>.json).

Why from the printed tables: the markdown table is each bench's one statement of its figures
(docs/benchmarks.md quotes it), and the benches' measuring code changes often; taking the JSON
from the same rows keeps the two from drifting apart and lets a new row or column appear in the
JSON with no edit here. A bench calls two functions, nothing else changes:

    bench_json.add_option(parser)            # before parse_args
    bench_json.record(args, "launcher")      # after parse_args: stdout is copied from here on

and at exit the document is written (also when the bench fails half way: what it printed).

Document: {"bench", "command", "date", "host", "cpus", "repeats", "tables": [{"title", "columns",
"rows": [{"name", "cells": [{"text", "value", "unit", "ratio", "low", "high"}]}]}],
"records": [every JSON object line the bench printed (bench_scale's runs)], "notes": [other lines]}.
A cell's "text" is what was printed; "value"/"unit" are there when it starts with a number
("20.5 ms" -> 20.5, "ms"; "12,345" -> 12345), "ratio" for "**31x faster**"/"1.35x", "low"/"high"
for a printed range ("1.90-2.10").
"""
import atexit
import datetime
import io
import json
import os
import platform
import re
import sys

_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
_VALUE = re.compile(rf"^[<>~≈]?\s*({_NUMBER})\s*(.*)$")
_RATIO = re.compile(rf"^({_NUMBER})x\b\s*(.*)$")
_RANGE = re.compile(rf"^({_NUMBER})\s*[-–]\s*({_NUMBER})\s*(\S*)$")


def _number(text):
    return float(text.replace(",", ""))


def parse_cell(text):
    """One printed table cell -> {"text", and what of value/unit/ratio/low/high it states}."""
    cell = {"text": text}
    bare = text.replace("**", "").replace("&nbsp;", " ").strip()
    span = _RANGE.match(bare)
    ratio = _RATIO.match(bare)
    value = _VALUE.match(bare)
    if span:
        cell.update(low=_number(span.group(1)), high=_number(span.group(2)))
        if span.group(3):
            cell["unit"] = span.group(3)
    elif ratio:
        cell["ratio"] = _number(ratio.group(1))
        if ratio.group(2):
            cell["unit"] = ratio.group(2)
    elif value:
        cell["value"] = _number(value.group(1))
        if value.group(2):
            cell["unit"] = value.group(2)
    return cell


def _split_row(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_output(text):
    """The tables, JSON object lines and other lines of a bench's standard output."""
    tables, records, notes = [], [], []
    lines = text.splitlines()
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        is_header = (line.startswith("|") and i + 1 < len(lines)
                     and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()))
        if is_header:
            table = {"title": title, "columns": _split_row(line), "rows": []}
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _split_row(lines[i])
                table["rows"].append({"name": cells[0].replace("&nbsp;", "").strip(),
                                      "cells": [parse_cell(c) for c in cells[1:]]})
                i += 1
            tables.append(table)
            continue
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                notes.append(line)
        elif line.startswith("|"):  # a row whose table had no header (bench_hang's recover rows)
            cells = _split_row(line)
            if not tables or tables[-1]["title"] != title:
                tables.append({"title": title, "columns": [], "rows": []})
            tables[-1]["rows"].append({"name": cells[0], "cells": [parse_cell(c) for c in cells[1:]]})
        elif line:
            title = line.lstrip("#").strip()
            notes.append(line)
        i += 1
    return tables, records, notes


class _Tee(io.TextIOBase):
    """stdout as before, and a copy kept for the document."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()

    def fileno(self):
        return self.out.fileno()


def add_option(parser):
    parser.add_argument("--json", metavar="PATH",
                        help="also write the figures as one JSON document (scripts/plot_benchmarks.py)")


def write(path, bench, args, text):
    tables, records, notes = parse_output(text)
    document = {"bench": bench, "command": sys.argv, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "host": platform.node(), "cpus": os.cpu_count(), "repeats": getattr(args, "repeats", None),
                "tables": tables, "records": records, "notes": notes}
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        json.dump(document, out, indent=1, ensure_ascii=False)
        out.write("\n")
    os.replace(temporary, path)  # whole or not at all: a plot never reads half a document


def record(args, bench):
    """Copies standard output from here on; at exit writes it to args.json as the document."""
    if not getattr(args, "json", None):
        return
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    path = os.path.abspath(args.json)

    def finish():
        sys.stdout = tee.out
        write(path, bench, args, tee.copy.getvalue())

    atexit.register(finish)
