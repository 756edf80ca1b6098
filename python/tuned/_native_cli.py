"""_native_cli.py — the `tunectl` command a wheel installs: runs the tunectl
binary the package carries (tuned/_native/bin/tunectl)."""

import os
import sys

from . import _lib


def tunectl():
    d = _lib.packaged_dir()
    if not d:
        sys.exit("tunectl: this tuned package carries no binaries (it was not installed from its wheel)")
    exe = os.path.join(d, "bin", "tunectl")
    os.execv(exe, [exe, *sys.argv[1:]])
