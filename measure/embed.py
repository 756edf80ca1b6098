#!/usr/bin/env python3
"""embed.py IN OUT NAME — writes OUT, a C file defining `const char NAME[]`
holding the bytes of IN (the cuda-host harness header, written next to every
cuda-host candidate at build time)."""
import sys

src, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, "rb").read()
with open(out, "w") as f:
    f.write("/* Generated from %s by measure/embed.py: do not edit. */\n" % src.split("/")[-1])
    f.write("const char %s[] = {\n" % name)
    for i in range(0, len(data), 16):
        f.write("  " + ", ".join(str(b) for b in data[i:i + 16]) + ",\n")
    f.write("  0};\n")
