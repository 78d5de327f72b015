#!/usr/bin/env python3
"""readme_blocks.py README DIR WHICH -- print one of README.md's shell
walkthroughs verbatim, with its directory (/tmp/dxl for WHICH=log, /tmp/t
for WHICH=txn) moved under DIR (test_readme.c runs it)."""
import re
import sys

text = open(sys.argv[1]).read()
d, which = sys.argv[2], sys.argv[3]
old = {"log": "/tmp/dxl", "txn": "/tmp/t"}[which]
for b in re.findall(r"```sh\n(.*?)```", text, re.S):
    if f"cluster up --dir {old} " in b:
        print(re.sub(re.escape(old) + r"(?=[\s/]|$)", d + "/" + which, b), end="")
        sys.exit(0)
sys.exit(f"no walkthrough with 'cluster up --dir {old}' in {sys.argv[1]}")
