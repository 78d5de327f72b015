#!/usr/bin/env python3
"""check-docs.py -- docs/cli.md against the programs (issue 21.7).

For every command section of docs/cli.md with a synopsis (the first ```sh
block after '## `dxl CMD`'): every --option it names must appear in
'dxl CMD --help', and every '[--option VALUE]' whose VALUE is a literal
(not an upper-case placeholder) must equal the default that --help gives
for it ('[DEFAULT]' on the option's line). The table of exit codes must
list 0..4. Prints one line per check; exit 1 when any fails.

Usage: scripts/check-docs.py BIN_DIR DOCS_CLI_MD
"""
import re
import subprocess
import sys

bindir, doc = sys.argv[1], sys.argv[2]
text = open(doc).read()
bad = 0
checked = 0


def help_of(cmd):
    r = subprocess.run([bindir + "/dxl"] + cmd.split() + ["--help"],
                       capture_output=True, text=True, timeout=30)
    return r.stdout


for sec in re.split(r"\n## ", text):
    m = re.match(r"`dxl ([a-z ]+)`", sec)
    if not m:
        continue
    cmd = m.group(1).strip()
    blk = re.search(r"```sh\n(.*?)```", sec, re.S)
    if not blk or not blk.group(1).lstrip().startswith("dxl " + cmd):
        continue
    syn = blk.group(1)
    h = help_of(cmd)
    for opt in sorted(set(re.findall(r"(--[a-z][a-z0-9-]+)", syn))):
        checked += 1
        if not re.search(r"(^|[\s,\[|])" + re.escape(opt) + r"\b", h):
            print(f"BAD  dxl {cmd}: docs/cli.md names {opt}, --help does not")
            bad += 1
    for opt, val in re.findall(r"\[(--[a-z][a-z-]+) ([^\]\s]+)\]", syn):
        if re.fullmatch(r"[A-Z][A-Z_=]*", val) or "|" in val or "," in val:
            continue  # a placeholder (N, DIR, KEY=VALUE) or alternatives
        line = next((l for l in h.splitlines() if l.strip().startswith(opt + " ")), None)
        if line is None:
            continue
        # the option's help text may continue on the next lines: its [default]
        i = h.splitlines().index(line)
        rest = " ".join(h.splitlines()[i:i + 4])
        d = re.search(r"\[([^\]]+)\]", rest[len(opt) + 2:])
        if not d:
            continue
        checked += 1
        if d.group(1) != val:
            print(f"BAD  dxl {cmd}: docs/cli.md shows [{opt} {val}], --help's default is [{d.group(1)}]")
            bad += 1
codes = re.search(r"## Exit codes\n(.*?)\n## ", text, re.S)
checked += 1
if not codes or any(f"\n| {c} |" not in codes.group(1) for c in range(5)):
    print("BAD  docs/cli.md: no 'Exit codes' table with 0..4")
    bad += 1
print(f"check-docs: {checked} checks, {bad} failed")
sys.exit(1 if bad else 0)
