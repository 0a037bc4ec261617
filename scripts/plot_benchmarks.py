#!/usr/bin/python3
"""Draws the benchmarks' side-by-side comparisons as PNGs (matplotlib, no display needed).

    scripts/plot_benchmarks.py [--results bench-results] [--out docs/img] [PLOT ...]

Reads the JSON documents the benches write with --json (tests/bench/bench_json.py; scripts/bench.sh
puts them in bench-results/<bench>.json) and draws, each from one side-by-side run:

  launch   launcher.json: launching 8 no-op workers, ddprun vs the kernel's floor vs torchrun (log)
  restart  launcher.json: worker death -> every new worker running, ddprun vs torchrun (log)
  store    store.json: ops/s by connection count, ddprun-rendezvous vs torch's TCPStore servers
  relay    relay.json: direct access vs through the relay (by one-way delay where the run has one)
  relay-delay  relay-delay.json: through the relay / direct across a delayed link, by one-way delay
  scale    scale.json: form / re-form time vs nodes (log-log), a linear guide, the power law
           through the two largest sizes out to 100,000 nodes, and torch's published points; a
           spare's replacement of a lost node where the spare scenario ran

A plot whose JSON is missing (that bench not run) or holds none of its rows is skipped with one
line; the others are still drawn. /usr/bin/python3 (Debian's python3-matplotlib).
"""
import argparse
import json
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "bench"))

try:
    import matplotlib
    matplotlib.use("Agg")  # files only: no display on a CI runner or over ssh
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
except ImportError:
    plt = None

from bench_scale import extrapolate, measured, store_label  # noqa: E402  (the same power law the bench prints)

# torch's published figures, beside the scale plot (docs/benchmarks.md, "Scale").
TORCH_POINTS = [(96_000, 100.0, "torch libuv TCPStore:\n96K clients, ~100 s"),
                (4_000, 10.0, "torchelastic, 4,000 hosts:\n10 s (pytorch#124982)")]
# First match wins: ddprun blue, the kernel's floor grey, torch 1.13 reds, torch 2.6 orange.
COLOURS = [("--version", "#9ecae1"), ("ddprun", "#1f77b4"), ("floor", "#7f7f7f"),
           ("2.6", "#ff7f0e"), ("monitor 5 s", "#8c1c13"), ("torch", "#d62728")]


class Skip(Exception):
    """This plot cannot be drawn from what was measured; the reason is one line."""


def load(results, bench):
    path = os.path.join(results, f"{bench}.json")
    if not os.path.exists(path):
        raise Skip(f"{path} missing (run scripts/bench.sh {bench})")
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as error:
        raise Skip(f"{path} is not a bench's JSON ({error}): run scripts/bench.sh {bench} again")


def provenance(fig, doc):
    repeats = f", median of {doc['repeats']} alternating runs" if doc.get("repeats") else ""
    fig.text(0.01, 0.01, f"{doc['bench']}: {doc.get('date', '?')}, {doc.get('host', '?')}, "
             f"{doc.get('cpus', '?')} CPUs{repeats}", fontsize=6, color="#555555")


def rows(doc):
    for table in doc.get("tables", []):
        for row in table["rows"]:
            yield table, row


def seconds(cell):
    """A printed time in seconds, from its value and unit (ms, s, us)."""
    if "value" not in cell:
        return None
    unit = cell.get("unit", "s").split()[0] if cell.get("unit") else "s"
    scale = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6}.get(unit)
    return None if scale is None else cell["value"] * scale


def anchor_of(name):
    """'... (vs torchrun 1.13 (monitor 5 s, its default))' -> 'torchrun 1.13 (monitor 5 s, its default)'."""
    at = name.find("(vs ")
    if at < 0:
        return None
    text = name[at + 4:]
    text = text[:-1] if text.endswith(")") else text
    return text.split(":")[0].strip()


def colour(label):
    return next((value for key, value in COLOURS if key in label), None)


def save(fig, out, name):
    path = os.path.join(out, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {name}: {path}")


def plot_launch(results, out):
    doc = load(results, "launcher")
    bars = {}
    for _, row in rows(doc):
        if row["name"].startswith("launch 8 no-op workers") and len(row["cells"]) >= 2:
            ours, anchor = seconds(row["cells"][0]), seconds(row["cells"][1])
            if ours is not None:
                bars.setdefault("ddprun", ours)
            if anchor is not None and anchor_of(row["name"]):
                bars.setdefault(anchor_of(row["name"]), anchor)
        elif row["name"].startswith("`ddprun --version`") and row["cells"]:
            if seconds(row["cells"][0]) is not None:
                bars.setdefault("ddprun --version", seconds(row["cells"][0]))
    if "ddprun" not in bars or len(bars) < 2:
        raise Skip("launcher.json has no launch rows (run scripts/bench.sh launcher --only launch)")
    labels = sorted(bars, key=bars.get)
    values = [bars[k] * 1000 for k in labels]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(labels) + 1.6))
    ax.barh(labels, values, color=[colour(k) or "#2ca02c" for k in labels])
    ax.set_xscale("log")
    ax.set_xlabel("wall time, ms (log scale; less is better)")
    ax.set_title("Launch 8 no-op workers: ddprun, the kernel's floor, torchrun", fontsize=10)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.1f} ms" if v < 100 else f" {v:,.0f} ms", va="center", fontsize=8)
    ax.set_xlim(min(values) / 2, max(values) * 6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "launch")


def plot_restart(results, out):
    doc = load(results, "launcher")
    groups = {}  # scenario -> {launcher: seconds}
    for _, row in rows(doc):
        match = re.match(r"worker death -> all new workers running, (.*?)(?: \(vs |$)", row["name"])
        if not match or not row["cells"]:
            continue
        bars = groups.setdefault(match.group(1), {})
        ours = seconds(row["cells"][0])
        if ours is not None:
            bars.setdefault("ddprun", ours)
        anchor = anchor_of(row["name"])
        if anchor and len(row["cells"]) > 1 and seconds(row["cells"][1]) is not None:
            bars.setdefault(anchor, seconds(row["cells"][1]))
    if not groups:
        raise Skip("launcher.json has no restart rows (run scripts/bench.sh launcher --only restart)")
    launchers = []
    for bars in groups.values():
        launchers += [k for k in bars if k not in launchers]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    width = 0.8 / len(launchers)
    for i, launcher in enumerate(launchers):
        xs = [g + i * width for g, bars in enumerate(groups.values()) if launcher in bars]
        ys = [bars[launcher] * 1000 for bars in groups.values() if launcher in bars]
        ax.bar(xs, ys, width, label=launcher, color=colour(launcher))
        for x, y in zip(xs, ys):
            ax.text(x, y, f"{y:,.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], list(groups))
    ax.set_yscale("log")
    every = [bars[k] * 1000 for bars in groups.values() for k in bars]
    ax.set_ylim(min(every) / 2, max(every) * 2.5)
    ax.set_ylabel("worker death -> all new workers running, ms (log)", fontsize=9)
    ax.set_title("Restart after a worker dies: ddprun vs torchrun", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "restart")


def plot_store(results, out):
    doc = load(results, "store")
    series = {}  # (engine, server) -> {connections: ops/s}
    torches = {"torch113": "torch 1.13", "torch26": "torch 2.6"}
    for table, row in rows(doc):
        columns = [c.lower() for c in table["columns"]]
        if columns[:2] == ["clients", "against"] and row["name"].replace(",", "").isdigit() and row["cells"]:
            # The ladder (threads engine, one table row per client count and torch server; the
            # figures of each against its own torch: one panel each).
            against = torches.get(row["cells"][0]["text"], row["cells"][0]["text"])
            for j, cell in enumerate(row["cells"][1:4], start=1):
                if "value" in cell and j + 1 < len(table["columns"]):
                    server = table["columns"][j + 1].replace("torch's server", f"{against}'s server")
                    series.setdefault((f"threads, vs {against}", server), {})[int(row["name"].replace(",", ""))] = cell["value"]
            continue
        match = re.search(r"ops/s.*?(\d[\d,]*) (?:clients?|connections?)(?:, (\w+))?", row["name"])
        if not match:
            continue
        clients, engine = int(match.group(1).replace(",", "")), match.group(2) or ""
        for j, cell in enumerate(row["cells"]):
            if "value" in cell and j + 1 < len(table["columns"]):
                series.setdefault((engine, table["columns"][j + 1]), {})[clients] = cell["value"]
    if not series:
        raise Skip("store.json has no ops/s rows")
    engines = sorted({e for e, _ in series}, key=lambda e: (e != "threads", e))
    fig, axes = plt.subplots(1, len(engines), figsize=(5.5 * len(engines), 4), squeeze=False)
    for ax, engine in zip(axes[0], engines):
        for (e, server), points in series.items():
            if e != engine:
                continue
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], marker="o", label=server, color=colour(server))
        ax.set_xscale("log", base=2)
        counts = sorted({x for (e, _), points in series.items() if e == engine for x in points})
        ax.set_xticks(counts, [f"{x:,}" for x in counts])
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("connections (one client each)")
        ax.set_ylabel("set/get/add ops/s (more is better)")
        title = f"{engine.replace(', ', ' generator, ', 1)}" if ", vs " in engine else f"{engine or 'load'} generator"
        ax.set_title(f"Store ops/s, {title}", fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "store")


def plot_relay(results, out):
    """Direct vs relay: against the one-way delay where the rows name one ('0.5 ms'), else one group
    of bars per row (engine and client count), every column that holds a figure a bar."""
    doc = load(results, "relay")
    panels = []
    for whole in doc.get("tables", []):
        # Rates and times apart: ops/s rows in one panel, the rest (seconds) in another.
        for rates in (True, False):
            table = dict(whole, rows=[r for r in whole["rows"] if ("ops/s" in r["name"]) == rates])
            numeric = [j for j in range(len(table["columns"]) - 1)
                       if any(j < len(r["cells"]) and "value" in r["cells"][j] for r in table["rows"])]
            if numeric and table["rows"]:
                panels.append((table, numeric, "ops/s (more is better)" if rates else "seconds (less is better)"))
    if not panels:
        raise Skip("relay.json has no table of figures")
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.6 * len(panels)), squeeze=False)
    for ax, (table, numeric, what) in zip(axes[:, 0], panels):
        ax.set_ylabel(what, fontsize=8)
        delays = [re.search(r"(\d+(?:\.\d+)?) ?ms", r["name"]) for r in table["rows"]]
        names = [table["columns"][j + 1] for j in numeric]
        if all(delays):
            xs = [float(d.group(1)) for d in delays]
            for j, name in zip(numeric, names):
                ys = [r["cells"][j].get("value") if j < len(r["cells"]) else None for r in table["rows"]]
                pts = sorted((x, y) for x, y in zip(xs, ys) if y is not None)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                        color=colour(name))
            ax.set_xscale("log")
            ax.set_xticks(sorted(set(xs)), [f"{x:g}" for x in sorted(set(xs))])
            ax.minorticks_off()
            ax.set_xlabel("one-way delay, ms (log)")
        else:
            width = 0.8 / len(numeric)
            for i, (j, name) in enumerate(zip(numeric, names)):
                ys = [r["cells"][j].get("value", 0) if j < len(r["cells"]) else 0 for r in table["rows"]]
                ax.bar([g + i * width for g in range(len(ys))], ys, width, label=name)
            ax.set_xticks([g + 0.4 - width / 2 for g in range(len(table["rows"]))],
                          [textwrap.fill(_short(r["name"], 60), 26) for r in table["rows"]], fontsize=7)
            ax.set_ylim(0, max(v for r in table["rows"] for v in (c.get("value", 0) for c in r["cells"])) * 1.5)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
        ax.set_title("Direct access vs the token, TLS and the relay" + (", by one-way delay" if all(delays) else ""),
                     fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "relay")


def plot_relay_delay(results, out):
    """Through the relay (and handed off, where the run has that column) against direct access
    across a link with a one-way delay, by delay: one line per load (the rows' second column) and
    way, with the issue's 1.1x goal."""
    doc = load(results, "relay-delay")
    series = {}
    for table, row in rows(doc):
        delay = re.search(r"(\d+(?:\.\d+)?) ?ms", row["name"])
        cells = row["cells"]
        # The columns after the name: "... vs direct ..." ones are the ratios (relay, handoff).
        titles = table.get("columns", [])[1:]
        if not delay or len(cells) < 2:
            continue
        for title, cell in zip(titles, cells):
            if "vs direct" in title and "ratio" in cell:
                way = title.split(" vs direct")[0]
                series.setdefault(f"{cells[0]['text']}, {way}", []).append(
                    (float(delay.group(1)), cell["ratio"]))
    if not series:
        raise Skip("relay-delay.json has no 'relay vs direct' rows (run scripts/bench.sh relay-delay)")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for load_text, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=load_text,
                ls="--" if load_text.endswith("handoff") else "-")
    delays = sorted({p[0] for pts in series.values() for p in pts})
    ax.axhline(1.1, color="#d62728", lw=0.8, ls="--", label="goal: within 1.1x of direct")
    ax.axhline(1.0, color="#999999", lw=0.6)
    ax.set_xscale("log")
    ax.set_xticks(delays, [f"{d:g}" for d in delays])
    ax.minorticks_off()
    ax.set_xlabel("one-way delay of the link, ms (log)")
    ax.set_ylabel("relay or handoff / direct (ops/s or time)")
    ax.set_title("The relay across a delayed link (network namespaces, a user-space delay link)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "relay-delay")


def _short(text, width=38):
    text = re.sub(r"\s+", " ", text.replace("set/get/add ", "").replace("(connect, add, wait)", "")
                  .replace(" (p50 / p99)", "").replace(": s", "")).replace(" ,", ",")
    return text if len(text) <= width else text[:width - 1] + "…"


def plot_scale(results, out):
    doc = load(results, "scale")
    records = [r for r in doc.get("records", []) if "backend" in r and "nodes" in r]
    formed = [r for r in records if measured(r, "form_s")]
    if not formed:
        raise Skip("scale.json has no run that formed a round (run scripts/bench.sh scale)")
    fig, ax = plt.subplots(figsize=(8, 5))
    top = 100_000
    # One pair of shades (form, re-form) per store: ddprun's own, then each etcd version measured.
    # (Never torch's red: its published points are drawn in it.)
    pairs = [("#1f77b4", "#6baed6"), ("#2ca02c", "#98df8a"), ("#9467bd", "#c5b0d5"),
             ("#ff7f0e", "#ffbb78")]
    stores = sorted(dict.fromkeys(store_label(r) for r in records),
                    key=lambda label: (label != "ddprun-rendezvous", label))
    for index, label in enumerate(stores):
        mine = sorted((r for r in records if store_label(r) == label), key=lambda r: r["nodes"])
        marker = "o" if label == "ddprun-rendezvous" else "s"
        ends = {}  # key -> (k, seconds at `top`)
        for key, style, what, shade in (("form_s", "-", "form", 0), ("reform_s", "--", "re-form", 1)):
            pts = [(r["nodes"], r[key]) for r in mine if measured(r, key)]
            if not pts:
                continue
            line, = ax.plot(*zip(*pts), style, marker=marker, color=pairs[index % len(pairs)][shade],
                            label=f"ddprun on {label}: {what}")
            fit = (extrapolate(mine, top) or {}).get(key)
            if fit:
                k, at_top = fit
                ax.plot([pts[-1][0], top], [pts[-1][1], at_top], ":", color=line.get_color())
                ends[key] = fit
        # A spare taking a lost node's place (the spare scenario, where it ran): no power law, since
        # on etcd most of it is the lost node's lease, a constant.
        spared = [(r["nodes"], r["replace_s"]) for r in mine if measured(r, "replace_s")]
        if spared:
            lease = {r.get("lost_hold_ttl_s") for r in mine if measured(r, "replace_s")}
            note = f" (its lease: {lease.pop():g} s)" if label != "ddprun-rendezvous" and len(lease) == 1 else ""
            ax.plot(*zip(*spared), "-.", marker=marker, markerfacecolor="none",
                    color=pairs[index % len(pairs)][0], label=f"ddprun on {label}: node lost -> a spare in its place{note}")
        # Right of the lines' ends, clear of torch's points; of a store's two, which often end
        # close by, the higher one's label above its end and the other's below.
        highest = max(ends.values(), key=lambda fit: fit[1])[1] if ends else None
        for k, at_top in ends.values():
            ax.annotate(f"N^{k:.2f}: ~{at_top:,.0f} s", (top, at_top), fontsize=7,
                        xytext=(4, 0), textcoords="offset points", ha="left",
                        va="bottom" if at_top == highest else "top")
    # The O(N) guide starts at the smallest c10d round (ddprun-rendezvous; etcd's where c10d has none).
    first = min(formed, key=lambda r: (r["backend"] != "c10d", r["nodes"]))
    ax.plot([first["nodes"], top], [first["form_s"], first["form_s"] * top / first["nodes"]],
            color="#999999", lw=0.8, label=f"O(N) from {store_label(first)} at {first['nodes']:,} nodes")
    for x, y, label in TORCH_POINTS:
        ax.plot([x], [y], "*", color=colour("torch"), markersize=12)
        right = x > 10_000  # its label left of it, clear of the extrapolations' labels
        ax.annotate(label, (x, y), fontsize=7, xytext=(-8 if right else 6, -14), textcoords="offset points",
                    ha="right" if right else "left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(right=top * 5)  # room for the extrapolations' labels
    ax.axvline(12_500, color="#cccccc", lw=0.8)
    ax.text(12_500, ax.get_ylim()[0], " 12,500 nodes\n (100,000 ranks at 8)", fontsize=6, va="bottom")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("nodes (simulated agents)")
    ax.set_ylabel("seconds (log)")
    ax.set_title("Forming / re-forming a round; a spare in a lost node's place (simulation; dotted: power law)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    provenance(fig, doc)
    save(fig, out, "scale")


PLOTS = {"launch": plot_launch, "restart": plot_restart, "store": plot_store, "relay": plot_relay,
         "relay-delay": plot_relay_delay, "scale": plot_scale}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="bench-results", help="where the benches' JSON is")
    parser.add_argument("--out", default=os.path.join("docs", "img"), help="where the PNGs go")
    parser.add_argument("plots", nargs="*", metavar="PLOT", help=f"some of {', '.join(PLOTS)} (default: all)")
    args = parser.parse_args()
    unknown = [p for p in args.plots if p not in PLOTS]
    if unknown:
        print(f"plot: error: unknown plot '{unknown[0]}' (one of: {', '.join(PLOTS)})", file=sys.stderr)
        return 2
    if plt is None:
        print("plot: error: matplotlib is missing: install python3-matplotlib (scripts/install-deps.sh) "
              "and run with /usr/bin/python3", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for name in args.plots or PLOTS:
        try:
            PLOTS[name](args.results, args.out)
        except Skip as why:
            print(f"plot: {name}: skipped: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
