#!/usr/bin/env python3
"""plot-recovery.py -- the plot of docs/recovery.md from the results of
scripts/bench-recovery.sh: SmallBank's transactions per second over the join
run (a node added to a loaded shard: when it was added and when it became a
member), with the in-process rebuild and open numbers as text. Writes SVG
(no plotting library needed).

Usage: scripts/plot-recovery.py [results/recovery.json] [results/recovery.svg]
"""
import json
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "results/recovery.json"
dst = sys.argv[2] if len(sys.argv) > 2 else "results/recovery.svg"
try:
    res = json.load(open(src))
except (OSError, ValueError) as e:
    sys.exit("plot-recovery: cannot read %s: %s (run scripts/bench-recovery.sh first)" % (src, e))
join = res.get("join", {})
tl = join.get("timeline") or []
if not tl:
    sys.exit("plot-recovery: %s has no join timeline (re-run scripts/bench-recovery.sh)" % src)

W, H, L, R, T, B = 760, 420, 70, 20, 40, 110
xmax = max(p["t_s"] for p in tl) or 1
ymax = max(p["txn_per_s"] for p in tl) * 1.1 or 1
X = lambda t: L + (W - L - R) * t / xmax
Y = lambda v: H - B - (H - T - B) * v / ymax
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="%d" y="20" font-size="14">SmallBank txn/s while a node joins a shard of %s records</text>'
       % (L, join.get("records", "?"))]
for i in range(6):  # y grid
    v = ymax * i / 5
    out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, Y(v), W - R, Y(v)))
    out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (L - 5, Y(v) + 4, v))
for i in range(7):  # x ticks
    t = xmax * i / 6
    out.append('<text x="%.1f" y="%d" text-anchor="middle">%d s</text>' % (X(t), H - B + 16, t))
pts = " ".join("%.1f,%.1f" % (X(p["t_s"]), Y(p["txn_per_s"])) for p in tl)
out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>' % pts)
for key, label, color in (("add_at_s", "added", "#d62728"), ("member_at_s", "member", "#2ca02c")):
    t = join.get(key)
    if t is not None:
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 3"/>'
                   % (X(t), T, X(t), H - B, color))
        out.append('<text x="%.1f" y="%d" fill="%s">%s</text>' % (X(t) + 3, T + 12, color, label))
fmt = lambda v: "-" if v is None else ("%.0f" % v if isinstance(v, (int, float)) else str(v))
lines = ["before %s txn/s, while joining %s, after %s; add -> member %s s; longest gap %s s"
         % (fmt(join.get("txn_per_s_before")), fmt(join.get("txn_per_s_while_joining")),
            fmt(join.get("txn_per_s_after")), join.get("add_to_member_s"), join.get("max_gap_s"))]
inp = res.get("inprocess")
if isinstance(inp, dict):
    lines.append("in process: " + ", ".join("%s %s" % (k, v) for k, v in list(inp.items())[:6]
                                             if not isinstance(v, (dict, list))))
if res.get("loadavg"):
    lines.append("load average at the end: " + " ".join(res["loadavg"]))
for i, s in enumerate(lines):
    out.append('<text x="%d" y="%d">%s</text>' % (L, H - B + 40 + 18 * i,
                                                    s.replace("&", "&amp;").replace("<", "&lt;")))
out.append("</svg>")
open(dst, "w").write("\n".join(out) + "\n")
print("wrote", dst)
