#!/usr/bin/env python3
"""report.py -- the markdown of comparison results (dxl-bench-compare's JSON).

Usage: bench/report.py [--title T] [--out FILE] RESULT.json [RESULT.json ...]

Writes one section per result file: what was compared and how (sides,
durability, configuration, machine, build, load, repetitions x seconds,
warm-up, the command), then a table per cell: for each metric the median and
range of A and of B, the median and range of the paired ratios A/B, the
number of pairs and the claim the rule allows (docs/benchmarks.md). Nothing
is computed here that the result file does not hold: the verdicts are the
runner's. A smoke run (fewer than 5 repetitions or under 10 s each) is
labelled as such in its heading and its claims read "none: smoke run".
A spec with a "curve" ({x: the cells' variable, label, metrics}) also gets a
plot of those metrics (median and range of each side) against x, written
next to --out as NAME.png (needs matplotlib).

docs/performance.md is this script's output on bench/results/*.json
(make bench-report); do not edit it by hand.
"""
import argparse
import json
import os
import sys


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.3g" % v


def rng(o):
    if not o:
        return "-"
    return "%s [%s-%s]" % (fmt(o.get("median")), fmt(o.get("min")), fmt(o.get("max")))


def ratio(o):
    if not o:
        return "-"
    return "%.3g [%.3g-%.3g]" % (o["median"], o["min"], o["max"])


def side_line(spec_side, side):
    cfg = (side or {}).get("config") or {}
    bits = []
    durable = spec_side.get("durable")
    bits.append("durable" if durable else
                ("NOT durable" if durable is False else "durability not stated"))
    cj = cfg.get("cluster_json")
    if cj:
        bits.append("%s durability, %s provider, %d replicas, %s shards" % (
            cj.get("durability", "?"), cj.get("provider", "?"), len(cj.get("replicas", [])),
            cj.get("shards", "?")))
        opts = cj.get("replica_opts")
        if opts:
            bits.append("options %s" % json.dumps(opts, separators=(",", ":")))
    if not cj and cfg.get("system"):
        bits.append(cfg["system"])
    if not cj:
        for k in ("durability", "provider", "replicas", "writers"):
            if cfg.get(k) is not None:
                bits.append("%s %s" % (k, cfg[k]))
    if cfg.get("version"):
        bits.append("version %s" % cfg["version"].splitlines()[0])
    if cfg.get("members"):
        m0 = cfg["members"][0].get("command")
        bits.append("%d members%s" % (len(cfg["members"]),
                                       (", flags: `%s`" % " ".join(m0[1:])) if m0 else ""))
    if cfg.get("jvm"):
        bits.append("JVM: `%s`" % cfg["jvm"])
    for d in (side or {}).get("datadirs", []):
        bits.append("data on %s (%s)" % (d.get("fstype", d.get("error", "?")),
                                          d.get("mount", d.get("path", "?"))))
    return "; ".join(bits)


def sample_floor(cell, side, path):
    """the fewest latency samples of a side's runs in a cell (percentiles
    come from each run's own histogram)"""
    ns = []
    for run in cell.get("runs", []):
        s = (run.get(side) or {}).get("summary") or {}
        lat = s.get("latency") or {}
        if isinstance(lat.get("n"), int):
            ns.append(lat["n"])
    return min(ns) if ns else None


def plot_curve(r, plot_dir, out):
    """the spec's "curve" {x: env var of the cells, label, metrics}: each
    metric's median and range for A and B against x, to plot_dir/NAME.png"""
    spec = r.get("spec", {})
    cv = spec.get("curve")
    if not cv or not plot_dir:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out.append("_(plot not drawn: matplotlib is missing)_\n")
        return
    cells = [c for c in r.get("cells", []) if (c.get("env") or {}).get(cv["x"])]
    if not cells:
        return
    names = cv.get("metrics", [])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, mname in zip(axes[0], names):
        drawn = 0
        for side, fmt_ in (("a", "o-"), ("b", "s--")):
            xs, ys, lo, hi = [], [], [], []
            for c in cells:
                m = next((m for m in c.get("metrics", []) if m["name"] == mname), None)
                v = (m or {}).get(side)
                if not v:
                    continue
                xs.append(float(c["env"][cv["x"]]))
                ys.append(v["median"])
                lo.append(v["median"] - v["min"])
                hi.append(v["max"] - v["median"])
            if xs:
                drawn += 1
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=fmt_, capsize=3,
                            label=(spec.get(side) or {}).get("label", side))
        ax.set_xlabel(cv.get("label", cv["x"]))
        ax.set_ylabel("%s (us, median and range)" % mname)
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.set_yscale("log")
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no values: too few samples per run", ha="center",
                    va="center", transform=ax.transAxes)
    title = r.get("title", "")
    if r.get("smoke"):
        title = "SMOKE RUN, NOT A MEASUREMENT: " + title
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    name = "%s.png" % r.get("name", "curve")
    fig.savefig(os.path.join(plot_dir, name), dpi=100)
    plt.close(fig)
    out.append("![%s](%s)\n" % (r.get("title", name), name))


def section(path, r, out, plot_dir=None):
    spec = r.get("spec", {})
    smoke = r.get("smoke", True)
    title = r.get("title", r.get("name", path))
    out.append("## %s%s\n" % (title, " -- SMOKE RUN, NOT A MEASUREMENT" if smoke else ""))
    if smoke:
        out.append("> **Smoke run**: %s repetitions of %s s. It shows that the pipeline "
                   "works; its numbers carry no claim and must not be quoted.\n"
                   % (r.get("reps"), r.get("seconds")))
    if spec.get("description"):
        out.append(spec["description"] + "\n")
    m = r.get("machine", {})
    la0, la1 = r.get("loadavg_start") or [], r.get("loadavg_end") or []
    out.append("- result file: `%s`" % path)
    out.append("- command: `%s`" % r.get("command", "?"))
    out.append("- date: %s to %s (%.0f s)" % (r.get("date_start"), r.get("date_end"),
                                              r.get("wall_s", 0)))
    out.append("- source: `%s` (runner built from `%s`)" % (r.get("source_git"),
                                                           r.get("runner_build")))
    out.append("- machine: %s x %s, %s, %.1f GiB, host %s" % (
        m.get("cpus"), m.get("cpu_model"), m.get("kernel"), m.get("mem_gib", 0), m.get("host")))
    out.append("- load average (1/5/15 min): %s at the start, %s at the end" % (
        "/".join("%.2f" % x for x in la0) or "?", "/".join("%.2f" % x for x in la1) or "?"))
    out.append("- method: %s repetitions of %s s per side, interleaved in alternating order, "
               "after a warm-up of %s s for each side (%s s before each later cell)" % (
                   r.get("reps"), r.get("seconds"), r.get("warmup_seconds"),
                   r.get("cell_warmup_seconds")))
    sides = r.get("sides", {})
    for k in ("a", "b"):
        out.append("- %s: **%s**: %s" % (k.upper(), (spec.get(k) or {}).get("label"),
                                          side_line(spec.get(k) or {}, sides.get(k))))
    builds = set()
    for cell in r.get("cells", []):
        for k in ("a", "b"):
            bs = (cell.get("bench_setup") or {}).get(k) or {}
            if bs.get("build"):
                builds.add(bs["build"])
    if builds:
        out.append("- binaries measured: %s" % ", ".join("`%s`" % b for b in sorted(builds)))
    env = spec.get("env")
    if env:
        out.append("- environment: %s" % ", ".join("%s=%s" % kv for kv in sorted(env.items())))
    out.append("")
    for cell in r.get("cells", []):
        cname = cell.get("name") or "(one cell)"
        cenv = cell.get("env") or {}
        out.append("### %s%s\n" % (cname, (" (%s)" % ", ".join(
            "%s=%s" % kv for kv in sorted(cenv.items()))) if cenv else ""))
        out.append("| metric | A: %s | B: %s | A/B (paired) | pairs | claim |" % (
            (spec.get("a") or {}).get("label"), (spec.get("b") or {}).get("label")))
        out.append("|---|---:|---:|---:|---:|---|")
        for mt in cell.get("metrics", []):
            unit = mt.get("unit") or ""
            claim = mt.get("claim", mt.get("verdict"))
            if not mt.get("pairs") and any(k in mt.get("path", "") for k in ("p9", "p50")):
                claim = ("n/a: the runs have too few samples for this percentile "
                         "(p99 needs 1 000 per run, p99.9 10 000)")
            if mt.get("goal") and mt.get("goal_claim"):
                claim += "; goal %sx: %s" % (fmt(mt["goal"]), mt["goal_claim"])
            name = "%s (%s, %s better)" % (mt["name"], unit, mt.get("better"))
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                name, rng(mt.get("a")), rng(mt.get("b")), ratio(mt.get("ratio")),
                mt.get("pairs", 0), claim))
        busy, idle = [], {"a": [], "b": []}
        for run in cell.get("runs", []):
            for k in ("a", "b"):
                x = run.get(k) or {}
                if isinstance(x.get("cpu_busy"), (int, float)):
                    busy.append(x["cpu_busy"])
                if isinstance(x.get("idle_side_cpu_s"), (int, float)):
                    idle["b" if k == "a" else "a"].append(x["idle_side_cpu_s"])
        if busy:
            out.append("\nMachine CPU busy during the runs: %.0f%%-%.0f%%." % (
                100 * min(busy), 100 * max(busy)) + "".join(
                " While the other side ran, %s's processes used up to %.2f CPU-s." % (
                    k.upper(), max(v)) for k, v in sorted(idle.items()) if v))
        na, nb = sample_floor(cell, "a", None), sample_floor(cell, "b", None)
        if na is not None or nb is not None:
            out.append("\nLatency samples per run: at least %s (A), %s (B); nearest-rank "
                       "percentiles, none from fewer than 20 (p50), 1 000 (p99), 10 000 "
                       "(p99.9) samples." % (na, nb))
        out.append("")
    plot_curve(r, plot_dir, out)
    probs = r.get("problems") or []
    if probs:
        out.append("**Problems during the run** (the affected pairs are left out):\n")
        for p in probs:
            out.append("- %s" % p)
        out.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--title", default="dxl performance")
    ap.add_argument("--out", help="the markdown file [stdout]")
    ap.add_argument("results", nargs="*")
    a = ap.parse_args()
    out = ["# %s\n" % a.title,
           "<!-- generated by bench/report.py from the result files below "
           "(make bench-report); do not edit by hand -->\n",
           "Every comparison below was run by `dxl-bench-compare` with the method of "
           "docs/benchmarks.md: the two sides interleaved in alternating order, repeated, "
           "after a warm-up both get; the ratio is the median and range of the paired "
           "ratios; a side is called better only when the ranges of the two sides do not "
           "overlap, from at least 5 repetitions of at least 10 s.\n"]
    results = []
    for p in a.results:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            print("report.py: %s: %s" % (p, e), file=sys.stderr)
            return 1
        if r.get("format") != "dxl-bench-compare/1":
            print("report.py: %s: not a dxl-bench-compare result" % p, file=sys.stderr)
            return 1
        results.append((p, r))
    if not results:
        out.append("_No comparison has been published yet: run `make bench-report` on a "
                   "quiet machine (docs/benchmarks.md)._\n")
    plot_dir = (os.path.dirname(a.out) or ".") if a.out else None
    if plot_dir:
        os.makedirs(plot_dir, exist_ok=True)
    for p, r in results:
        section(p, r, out, plot_dir)
    text = "\n".join(out).rstrip() + "\n"
    if a.out:
        d = os.path.dirname(a.out)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
