#!/usr/bin/env python3
"""plot-fabric.py -- PNG plots of a dxl-bench-fabric JSON result.

Usage: bench/plot-fabric.py [results/fabric.json ...]
       bench/plot-fabric.py --md results/fabric.json   (Markdown summary
                                                     tables on stdout)

For each JSON file F.json it writes, next to it:
  F-latency.png     p50 (solid) and p99 (dashed) latency vs payload size, one
                    panel per op, at batch 1 / 1 outstanding / 1 thread, with
                    the TCP ping-pong baseline (the floor of the medium)
  F-batch.png       ops/s vs doorbell batch, one panel per op, one line per
                    outstanding count (1 thread; the op's 64 B size, or its
                    smallest, and 8 B for CAS/FAA)
  F-outstanding.png ops/s vs outstanding chains, one line per thread count
                    (batch 1, same sizes)

Needs matplotlib (Debian: apt-get install python3-matplotlib). If it is not
importable, the script says so and exits 0, so `make bench` does not fail on
a machine without it.
"""
import json
import os
import sys


def _import_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        # A pyenv or venv python3 may lack the Debian package that the
        # system interpreter has: retry once with it.
        system = "/usr/bin/python3"
        if (os.path.exists(system) and os.path.realpath(sys.executable)
                != os.path.realpath(system)
                and not os.environ.get("DXL_PLOT_REEXEC")):
            os.environ["DXL_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        return None


def cells(doc, **want):
    out = []
    for r in doc.get("results", []):
        if r.get("skipped") or not r.get("samples"):
            continue
        if all(r.get(k) == v for k, v in want.items()):
            out.append(r)
    return out


def ops_of(doc):
    seen = []
    for r in doc.get("results", []):
        if r["op"] not in seen and not r.get("skipped") and r.get("samples"):
            seen.append(r["op"])
    return seen


def grid(plt, n):
    cols = min(3, max(1, n))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows),
                             squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat


def title(doc):
    s = doc.get("setup", {})
    host = s.get("host", {})
    return "dxl fabric, provider %s, %s cpus, %s (%s)" % (
        doc.get("provider", "?"), host.get("cpus_online", "?"),
        host.get("nodename", "?"), s.get("date", "?"))


def plot_latency(plt, doc, path):
    ops = ops_of(doc)
    if not ops:
        return False
    pp = {b["size"]: b for b in doc.get("tcp_pingpong", []) if b.get("runs")}
    fig, axes = grid(plt, len(ops))
    for ax, op in zip(axes, ops):
        rs = sorted(cells(doc, op=op, batch=1, outstanding=1, threads=1),
                    key=lambda r: r["size"])
        if rs:
            x = [r["size"] for r in rs]
            ax.plot(x, [r["p50_ns"] / 1e3 for r in rs], "o-", label="p50")
            ax.plot(x, [r["p99_ns"] / 1e3 for r in rs], "o--", label="p99")
        xs = sorted(s for s in pp if not rs or s in [r["size"] for r in rs])
        if xs:
            ax.plot(xs, [pp[s]["p50_ns"] / 1e3 for s in xs], "k:",
                    marker="x", label="TCP ping-pong p50")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("payload bytes")
        ax.set_ylabel("latency (us, log)")
        ax.set_title("%s (batch 1, 1 outstanding, 1 thread)" % op.upper(),
                     fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title(doc), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def pick_size(doc, op):
    sizes = sorted({r["size"] for r in cells(doc, op=op)})
    if not sizes:
        return None
    return 64 if 64 in sizes else sizes[0]


def plot_vs(plt, doc, path, xkey, linekey, fixed):
    ops = ops_of(doc)
    if not ops:
        return False
    fig, axes = grid(plt, len(ops))
    for ax, op in zip(axes, ops):
        size = pick_size(doc, op)
        rs = cells(doc, op=op, size=size, **fixed)
        for lv in sorted({r[linekey] for r in rs}):
            pts = sorted((r[xkey], r["ops_per_s"]) for r in rs
                         if r[linekey] == lv)
            ax.plot([p[0] for p in pts], [p[1] / 1e3 for p in pts], "o-",
                    label="%s %d" % (linekey, lv))
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xkey)
        ax.set_ylabel("k ops/s")
        ax.set_ylim(bottom=0)
        ax.set_title("%s %s B (%s)" % (op.upper(), size, ", ".join(
            "%s %s" % (k, v) for k, v in fixed.items())), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title(doc), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def fmt_us(ns):
    return "%.1f" % (ns / 1e3) if ns is not None else "-"


def fmt_ops(v):
    if v is None:
        return "-"
    return "%.2fM" % (v / 1e6) if v >= 1e6 else "%.0fk" % (v / 1e3)


def markdown(doc):
    """Summary tables of one result file, in Markdown."""
    out = []
    s = doc.get("setup", {})
    h = s.get("host", {})
    out.append("Provider `%s`, %s CPUs, kernel %s, %s, commit %s, wall %.0f s, "
               "load average %.2f -> %.2f, other processes busy on average "
               "%s CPUs." % (
                   doc.get("provider"), h.get("cpus_online"),
                   h.get("uname", {}).get("release", "?"), s.get("date"),
                   s.get("git_commit"), s.get("wall_s", 0),
                   (h.get("loadavg_start") or [0])[0],
                   (h.get("loadavg_end") or [0])[0],
                   h.get("other_cpus_mean")))
    out.append("")
    out.append("Command: `%s`" % " ".join(s.get("command_line", [])))
    out.append("")
    pp = {b["size"]: b for b in doc.get("tcp_pingpong", []) if b.get("runs")}
    sizes = sorted({r["size"] for r in doc.get("results", [])})
    out.append("**Latency at batch 1, 1 outstanding, 1 thread** (p50 / p99 "
               "in us; x = p50 / TCP ping-pong p50)")
    out.append("")
    out.append("| op | " + " | ".join("%d B" % z for z in sizes) + " |")
    out.append("|---|" + "---|" * len(sizes))
    row = ["TCP ping-pong"]
    for z in sizes:
        b = pp.get(z)
        if b:
            best = min((x for x in b["runs"] if x["p50_ns"]),
                       key=lambda x: x["p50_ns"])
            row.append("%s / %s" % (fmt_us(b["p50_ns"]),
                                    fmt_us(best["p99_ns"])))
        else:
            row.append("")
    out.append("| " + " | ".join(row) + " |")
    for op in ops_of(doc):
        row = [op.upper()]
        for z in sizes:
            rs = cells(doc, op=op, size=z, batch=1, outstanding=1, threads=1)
            if not rs:
                row.append("")
                continue
            r = rs[0]
            x = r.get("ratio_p50_vs_tcp")
            row.append("%s / %s (%sx)" % (fmt_us(r["p50_ns"]),
                                          fmt_us(r["p99_ns"]),
                                          "%.2f" % x if x else "-"))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append("**Throughput, 1 thread** (ops/s; size 64 B, atomics 8 B; "
               "rows: batch, columns: outstanding chains)")
    out.append("")
    for op in ops_of(doc):
        size = pick_size(doc, op)
        rs = cells(doc, op=op, size=size, threads=1)
        bs = sorted({r["batch"] for r in rs})
        os_ = sorted({r["outstanding"] for r in rs})
        if not rs:
            continue
        out.append("%s %d B:" % (op.upper(), size))
        out.append("")
        out.append("| batch \\ out | " + " | ".join(str(o) for o in os_) + " |")
        out.append("|---|" + "---|" * len(os_))
        for b in bs:
            row = [str(b)]
            for o in os_:
                c = [r for r in rs if r["batch"] == b and r["outstanding"] == o]
                row.append(fmt_ops(c[0]["ops_per_s"]) if c else "")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    best = {}
    for r in cells(doc):
        k = r["op"]
        if k not in best or r["ops_per_s"] > best[k]["ops_per_s"]:
            best[k] = r
    out.append("**Peak ops/s per op** (any cell)")
    out.append("")
    out.append("| op | ops/s | size | batch | out | threads | p50 us |")
    out.append("|---|---|---|---|---|---|---|")
    for op in ops_of(doc):
        r = best.get(op)
        if r:
            out.append("| %s | %s | %d | %d | %d | %d | %s |" % (
                op.upper(), fmt_ops(r["ops_per_s"]), r["size"], r["batch"],
                r["outstanding"], r["threads"], fmt_us(r["p50_ns"])))
    out.append("")
    idle = doc.get("idle_cpu", {})
    if idle.get("measured"):
        out.append("**Idle CPU** over %.1f s: idle probe process %.3f%% of a "
                   "core (/proc/<pid>/stat ticks: %.2f%%), benchmark server "
                   "%s%%, client %.3f%%." % (
                       idle["window_s"], idle["peer_cpu_pct"],
                       idle["peer_cpu_pct_ticks"],
                       "%.3f" % idle["server_cpu_pct"]
                       if idle.get("server_cpu_pct") is not None else "-",
                       idle["client_cpu_pct"]))
        out.append("")
    pr = doc.get("read64_paired")
    if pr and pr.get("rounds"):
        out.append("**64 B READ vs ping-pong, paired rounds**: " + ", ".join(
            "%s/%s us = %.2f" % (fmt_us(x["read_p50_ns"]),
                                 fmt_us(x["tcp_pingpong_p50_ns"]), x["ratio"])
            for x in pr["rounds"]) + "; median of all rounds %.2f." % pr["median_ratio_all_rounds"])
        out.append("")
    out.append("**Goals** (reported, not asserted)")
    out.append("")
    out.append("| goal | target | value | verdict | detail |")
    out.append("|---|---|---|---|---|")
    for g in doc.get("goals", []):
        out.append("| %s | %s %s | %s | **%s** | %s |" % (
            g["name"], g["comparison"], g["target"],
            "%.2f" % g["value"] if g.get("value") is not None else "-",
            g["verdict"], g.get("detail", "")))
    out.append("")
    out.append("Data checks: %d verification errors, %d failed completions." % (
        doc.get("verify_errors_total", 0), doc.get("errors_total", 0)))
    return "\n".join(out)


def main(argv):
    paths = argv[1:] or ["results/fabric.json"]
    if any(p in ("-h", "--help") for p in paths):
        print(__doc__.strip())
        return 0
    if paths[0] == "--md":
        for path in paths[1:] or ["results/fabric.json"]:
            with open(path) as fp:
                print(markdown(json.load(fp)))
            print()
        return 0
    plt = _import_matplotlib()
    if plt is None:
        print("plot-fabric: matplotlib is not installed (apt-get install "
              "python3-matplotlib); no plots drawn")
        return 0
    status = 0
    for path in paths:
        try:
            with open(path) as fp:
                doc = json.load(fp)
        except (OSError, ValueError) as e:
            print("plot-fabric: %s: %s" % (path, e), file=sys.stderr)
            status = 1
            continue
        base = os.path.splitext(path)[0]
        made = []
        if plot_latency(plt, doc, base + "-latency.png"):
            made.append(base + "-latency.png")
        if plot_vs(plt, doc, base + "-batch.png", "batch", "outstanding",
                   {"threads": 1}):
            made.append(base + "-batch.png")
        if plot_vs(plt, doc, base + "-outstanding.png", "outstanding",
                   "threads", {"batch": 1}):
            made.append(base + "-outstanding.png")
        print("plot-fabric: %s" % (", ".join(made) if made else
                                   "%s has no measured cells" % path))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
