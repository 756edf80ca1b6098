"""tuned_build.py — the Python package's build backend (PEP 517, in-tree):
`pip install ./python` or `pip wheel ./python` builds tuned with meson and
packs the package with its native part — libtuned, libtuned_local, tunectl,
tuned, tuned-worker and the target files — under tuned/_native/ (lib/, bin/,
share/tuned/configs/), the layout those binaries look in, so that `import
tuned` and tuning in-process need no variable and no daemon.

The build directory is the repository's build-wheel/ (kept: a second
install compiles only what changed), or the one named by the config setting
builddir (`pip install --config-settings builddir=build ./python`: an existing build's
binaries, not rebuilt).  Needs meson, ninja and tuned's build dependencies
(scripts/install-deps); nothing is downloaded."""

import base64
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)                                         # the repository

# what goes into tuned/_native/: (path in the build directory, where in the package)
NATIVE = [("client/libtuned.so", "lib/libtuned.so"), ("client/libtuned_local.so", "lib/libtuned_local.so"),
          ("client/tunectl", "bin/tunectl"), ("daemon/tuned", "bin/tuned"), ("measure/tuned-worker", "bin/tuned-worker")]


def _project():
    """pyproject.toml's [project] table (tomllib on Python 3.11+; before it,
    the simple `key = "string"` and `key = [...]` lines this file uses)."""
    path = os.path.join(HERE, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        import ast
        import re
        p, table = {}, None
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line.startswith("["):
                    table = line.strip("[]")
                    continue
                m = re.match(r"([\w-]+)\s*=\s*(.+)", line)
                if m and table == "project":
                    p[m.group(1)] = ast.literal_eval(m.group(2))
                elif m and table == "project.optional-dependencies":
                    p.setdefault("optional-dependencies", {})[m.group(1)] = ast.literal_eval(m.group(2))
        return p
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p['description']}", f"Requires-Python: {p['requires-python']}"]
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {r}; extra == \"{extra}\"" for r in reqs]
    with open(os.path.join(HERE, p["readme"]), encoding="utf-8") as f:
        readme = f.read()
    return p["name"], p["version"], "\n".join(lines) + "\nDescription-Content-Type: text/markdown\n\n" + readme


def _run(cmd, **kw):
    print("tuned_build:", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=sys.stderr, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"tuned_build: {' '.join(cmd)} failed (status {r.returncode}); see the output above "
                           "(scripts/install-deps installs what tuned needs to build)")


def _build(config_settings):
    """The build directory with tuned built in it."""
    given = (config_settings or {}).get("builddir")
    if given:
        b = os.path.abspath(os.path.join(ROOT, given)) if not os.path.isabs(given) else given
        missing = [src for src, _ in NATIVE if not os.path.exists(os.path.join(b, src))]
        if missing:
            raise RuntimeError(f"tuned_build: builddir {b} lacks {', '.join(missing)}: build it first "
                               f"(meson compile -C {b})")
        return b
    for tool in ("meson", "ninja"):
        if not shutil.which(tool):
            raise RuntimeError(f"tuned_build: {tool} not found: building tuned needs meson and ninja "
                               "(scripts/install-deps, or apt-get install meson ninja-build)")
    b = os.path.join(ROOT, "build-wheel")
    if not os.path.exists(os.path.join(b, "build.ninja")):
        _run(["meson", "setup", b, ROOT, "--buildtype=release", "-Dtests=disabled"])
    _run(["meson", "compile", "-C", b])
    return b


def _files(b):
    """(archive name, bytes, executable) of everything the wheel holds."""
    out = []
    pkg = os.path.join(HERE, "tuned")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                out.append((f"tuned/{name}", f.read(), False))
    for src, dst in NATIVE:
        with open(os.path.join(b, src), "rb") as f:
            out.append((f"tuned/_native/{dst}", f.read(), True))
    configs = os.path.join(ROOT, "configs")
    for d, _, names in sorted(os.walk(configs)):
        for name in sorted(names):
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                out.append((f"tuned/_native/share/tuned/configs/{os.path.relpath(path, configs)}", f.read(), False))
    return out


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _add(z, name, data, executable=False):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16  # pip wants S_IFREG for the x bits
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _dist_info(name, version, metadata):
    tag = _tag()
    wheel = f"Wheel-Version: 1.0\nGenerator: tuned_build\nRoot-Is-Purelib: false\nTag: {tag}\n"
    entry = "[console_scripts]\ntunectl = tuned._native_cli:tunectl\n"
    return f"{name}-{version}.dist-info", {"METADATA": metadata, "WHEEL": wheel, "entry_points.txt": entry}


# ---- PEP 517 -------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version, metadata = _metadata()
    di, files = _dist_info(name, version, metadata)
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    for fname, text in files.items():
        with open(os.path.join(metadata_directory, di, fname), "w", encoding="utf-8") as f:
            f.write(text)
    return di


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, metadata = _metadata()
    b = _build(config_settings)
    di, meta = _dist_info(name, version, metadata)
    whl = f"{name}-{version}-{_tag()}.whl"
    buf = io.BytesIO()
    records = []
    with zipfile.ZipFile(buf, "w") as z:
        for arc, data, exe in _files(b):
            records.append(_add(z, arc, data, exe))
        for fname, text in meta.items():
            records.append(_add(z, f"{di}/{fname}", text.encode()))
        records.append(f"{di}/RECORD,,")
        _add(z, f"{di}/RECORD", ("\n".join(records) + "\n").encode())
    with open(os.path.join(wheel_directory, whl), "wb") as f:
        f.write(buf.getvalue())
    return whl


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("tuned_build: no sdist: the package builds from the repository (pip install ./python)")
