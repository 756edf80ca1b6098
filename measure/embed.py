#!/usr/bin/env python3
"""embed.py OUT NAME MAIN [PART...] — writes OUT, a C file defining
`const char NAME[]` holding MAIN (the cuda-host harness header, written next
to every cuda-host candidate at build time) with each line
`#include "PART"` replaced by that PART's text: one self-contained header.
A local include of MAIN that names no PART is an error (the candidate's
directory would not have it), and so is a PART that MAIN never includes."""
import os
import re
import sys

out, name, main = sys.argv[1], sys.argv[2], sys.argv[3]
parts = {os.path.basename(p): p for p in sys.argv[4:]}
used = set()
text = []
for lineno, line in enumerate(open(main, encoding="utf-8").read().split("\n"), 1):
    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
    if not m:
        text.append(line)
        continue
    if m.group(1) not in parts:
        sys.exit("embed.py: %s:%d includes \"%s\", which is not one of the parts given (%s)"
                 % (main, lineno, m.group(1), ", ".join(sorted(parts)) or "none"))
    used.add(m.group(1))
    text.append(open(parts[m.group(1)], encoding="utf-8").read().rstrip("\n"))
unused = sorted(set(parts) - used)
if unused:
    sys.exit("embed.py: %s never includes %s" % (main, ", ".join(unused)))
data = "\n".join(text).encode("utf-8")
with open(out, "w") as f:
    f.write("/* Generated from %s by measure/embed.py: do not edit. */\n" % os.path.basename(main))
    f.write("const char %s[] = {\n" % name)
    for i in range(0, len(data), 16):
        f.write("  " + ", ".join(str(b) for b in data[i:i + 16]) + ",\n")
    f.write("  0};\n")
