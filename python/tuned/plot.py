"""plot.py — pictures of tuning, drawn by matplotlib (the Agg backend: no
display needed) into a PNG or SVG file, chosen by the output's suffix:

  job       a job's tuning curve: every measured candidate and the best so far
            against the trial and against wall time, with the unscheduled
            program and (from a bench file) the library baselines as lines;
  report    a bench result file: GFLOP/s against size for tuned and its
            baselines, one panel per workload, as Triton's perf_report draws;
  roofline  the best record of every workload on a target against the
            target's peak FLOP/s and bandwidth (its target file's, given, or
            measured: a bench file's bandwidth and fastest GFLOP/s).

    python3 -m tuned.plot job 7 -o curve.png [--socket S] [--report BENCH.json]
    python3 -m tuned.plot report bench/cpu/results/2026-11-26-quick-t64.json -o report.svg
    python3 -m tuned.plot roofline -o roof.png [--target T] [--peaks GFLOPS,GBPS | --report BENCH.json]

`tunectl plot` runs this module.  The daemon's data comes through
tuned.Client (libtuned); bench files are read here."""

import argparse
import json
import math
import os
import sys

from ._errors import Error

FORMATS = (".png", ".svg")


class PlotError(Error):
    """Bad input to a plot: a message that says what and where."""


# ---- drawing --------------------------------------------------------------------------

def _pyplot(out=None):
    """matplotlib's pyplot (on the Agg backend when drawing into a file; a
    notebook's own otherwise), or a PlotError saying what to install."""
    try:
        import matplotlib
    except ImportError as e:
        raise PlotError(f"matplotlib is not installed for {sys.executable} ({e}): plots are drawn with it; "
                        "install it (Debian: apt-get install python3-matplotlib; else: pip install matplotlib)")
    if out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # SVG text stays text (searchable, and the file says which series it draws)
    matplotlib.rcParams["svg.fonttype"] = "none"
    return plt


def output_format(path):
    """'png' or 'svg' from the output file's suffix; anything else is a PlotError."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise PlotError(f"output {path}: unknown suffix {ext or '(none)'!r}: the format follows the suffix, "
                        f"one of {', '.join(FORMATS)}")
    return ext[1:]


def _save(fig, path, plt):
    """Writes fig into path and says what was written; path None: fig itself
    (a notebook shows it)."""
    if path is None:
        return fig
    fmt = output_format(path)
    try:
        fig.savefig(path, format=fmt, dpi=100, metadata={"Date": None} if fmt == "svg" else None)
    except OSError as e:
        raise PlotError(f"output {path}: {e.strerror or e}")
    finally:
        plt.close(fig)
    w, h = fig.get_size_inches() * 100
    return f"{path} ({fmt}, {int(round(w))}x{int(round(h))} px)"


def _line(ax, y, label, style, color, gid):
    ax.axhline(y, linestyle=style, color=color, linewidth=1.4, label=f"{label} ({y:.3g} GFLOP/s)", gid=gid)


def _gid(name):
    return "series-" + "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


# ---- the tuning curve of a job ------------------------------------------------------------

def job_data(client, job):
    """The job object (tune.status) and its trials (tune.trials): every
    candidate it measured, in order, with `trial`, `status`, `gflops` (what
    the search measured) and `elapsed_s` (when its measurement ended, in
    seconds since the job started)."""
    j = client.call("tune.status", job=int(job))
    trials = client.call("tune.trials", job=int(job))["trials"]
    return {"job": j, "trials": trials}


def library_lines(bench, workload_hash):
    """The baselines of the bench file's row of this workload (by hash): [(name, GFLOP/s)]."""
    for row in bench.get("rows", []) if isinstance(bench, dict) else []:
        if isinstance(row, dict) and row.get("hash") == workload_hash:
            return [(name, g) for name, g in _row_series(row).items() if name not in ("tuned", "unscheduled")]
    return []


def plot_job(data, out=None, library=()):
    """Draws the tuning curve of job_data's result into `out` and returns
    what was written; out None: returns the matplotlib Figure (notebooks)."""
    if out is not None:
        output_format(out)
    plt = _pyplot(out)
    j, trials = data["job"], data["trials"]
    if not trials:
        raise PlotError(f"job {j['job']} has no measured candidates to plot ({j['state']}, "
                        f"{j['trials_done']}/{j['trials']} trials; a job run by a tuned older than its "
                        "trials table, schema 5, has none recorded)")
    ok = [r for r in trials if r["status"] == "ok" and r.get("gflops")]
    bad = [r for r in trials if r["status"] != "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True, constrained_layout=True)
    for ax, key, xlabel in ((axes[0], "trial", "trial (candidates measured)"),
                            (axes[1], "elapsed_s", "wall time since the job started (s)")):
        ax.scatter([r[key] for r in ok], [r["gflops"] for r in ok], s=18, alpha=0.55, color="tab:blue",
                   label="candidate (verified)", gid="series-candidates")
        if bad:  # along the bottom edge, whatever the scale
            ax.scatter([r[key] for r in bad], [0.015] * len(bad), marker="x", s=28, color="tab:red",
                       transform=ax.get_xaxis_transform(), clip_on=False,
                       label="candidate (failed: " + ", ".join(sorted({r["status"] for r in bad})) + ")",
                       gid="series-failed")
        best, xs, ys = 0.0, [], []
        for r in sorted(trials, key=lambda r: r[key]):  # a failed build's time is its batch's commit
            if r["status"] == "ok" and r.get("gflops"):
                best = max(best, r["gflops"])
            if best > 0:
                xs.append(r[key])
                ys.append(best)
        if xs:
            ax.step(xs, ys, where="post", color="tab:green", linewidth=2, label="best so far", gid="series-best")
        base = (j.get("baseline") or {}).get("gflops")
        if base:
            _line(ax, base, "unscheduled program", "--", "gray", "series-unscheduled")
        for (name, g), style in zip(library, ("-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)))):
            _line(ax, g, name, style, "black", _gid("library-" + name))
        ax.set_xlabel(xlabel)
        ax.grid(True, which="both", alpha=0.3)
    first = min(r["elapsed_s"] for r in trials)
    # the axis starts near the first batch: the label says what the time before it went to
    axes[1].set_xlabel(f"wall time since the job started (s; the first batch ended at {first:.0f} s: reference, "
                       "sampling, builds)", fontsize="small")
    # every level drawn: the candidates, the unscheduled program and the libraries
    speeds = [r["gflops"] for r in ok] + [g for g in [base] + [g for _, g in library[:4]] if g]
    if speeds and max(speeds) > 30 * min(speeds):
        axes[0].set_yscale("log")  # shared: the slowest level (often the unscheduled program) and the best both read
    else:
        axes[0].set_ylim(bottom=0)
    axes[0].set_ylabel("GFLOP/s" + (" (log scale)" if axes[0].get_yscale() == "log" else ""))
    axes[0].legend(loc="best", fontsize="small", framealpha=0.9)
    best = (j.get("best") or {}).get("gflops")
    fig.suptitle(f"job {j['job']}: {j.get('name') or j['workload']} on {j['target']} — {len(trials)} candidates "
                 f"({len(bad)} failed), {j['state']}" + (f", best {best:.3g} GFLOP/s (re-measured)" if best else ""))
    return _save(fig, out, plt)


# ---- bench reports ----------------------------------------------------------------------

def _gflops(flops, secs):
    return flops / secs * 1e-9 if flops and secs and secs > 0 else None


def _row_series(row):
    """The GFLOP/s of tuned and its baselines in one bench/cpu/run row."""
    flops, s = row.get("flops"), {}
    tuned = (row.get("rerun") or {}).get("gflops") or (row.get("tuned") or {}).get("gflops")
    if tuned:
        s["tuned"] = tuned
    naive = _gflops(flops, (row.get("tuned") or {}).get("naive_secs"))
    if naive:
        s["unscheduled"] = naive
    b = row.get("baseline") or {}
    if b.get("gflops_workload") or b.get("gflops"):
        s[b.get("baseline") or "library"] = b.get("gflops_workload") or b.get("gflops")
    t = row.get("tvm") or {}
    if t.get("gflops_workload") or t.get("gflops"):
        s["TVM MetaSchedule"] = t.get("gflops_workload") or t.get("gflops")
    return s


def _size(params):
    return "x".join(str(v) for v in params.values()) if params else "?"


def report_points(bench, where="bench file"):
    """A bench result's points, whatever wrote it: [{workload, params, size,
    flops, series: {name: GFLOP/s}}].  Formats: bench/cpu/run's ("rows"),
    tunectl bench's ("results") and bench/gpu's baselines ("cases")."""
    if not isinstance(bench, dict):
        raise PlotError(f"{where}: not a bench result: a JSON object was expected, got {type(bench).__name__}")
    pts = []
    if isinstance(bench.get("rows"), list):
        for i, row in enumerate(bench["rows"]):
            if not isinstance(row, dict) or not isinstance(row.get("workload"), str):
                raise PlotError(f"{where}: rows[{i}] has no \"workload\" name")
            params = row.get("params") if isinstance(row.get("params"), dict) else {}
            pts.append({"workload": row["workload"], "params": params, "size": _size(params),
                        "flops": row.get("flops") or 0, "series": _row_series(row)})
    elif isinstance(bench.get("results"), list):
        for i, r in enumerate(bench["results"]):
            if not isinstance(r, dict) or not isinstance(r.get("name"), str):
                raise PlotError(f"{where}: results[{i}] has no \"name\"")
            params = r.get("params") if isinstance(r.get("params"), dict) else {}
            secs, g = r.get("median_secs"), r.get("gflops")
            flops = g * 1e9 * secs if g and secs else 0
            pts.append({"workload": r["name"], "params": params, "size": _size(params), "flops": flops,
                        "series": {"tuned": g} if r.get("found") and g else {}})
    elif isinstance(bench.get("cases"), dict):
        for key, impls in bench["cases"].items():
            name, _, size = key.partition(":")
            if not isinstance(impls, list):
                raise PlotError(f"{where}: cases[{key!r}] is not a list of implementations")
            series = {i["impl"]: i["gflops"] for i in impls
                      if isinstance(i, dict) and isinstance(i.get("impl"), str) and i.get("gflops")}
            pts.append({"workload": name, "params": {}, "size": size or "?", "flops": 0, "series": series})
    else:
        raise PlotError(f"{where}: not a bench result: expected \"rows\" (bench/cpu/run), \"results\" "
                        f"(tunectl bench --json) or \"cases\" (bench/gpu baselines); it has "
                        f"{', '.join(map(repr, list(bench)[:6])) or 'no keys'}")
    pts = [p for p in pts if p["series"]]
    if not pts:
        raise PlotError(f"{where}: no GFLOP/s figures to plot (no tuned or baseline times in it)")
    return pts


def read_bench(path):
    """A bench result file's JSON, or a PlotError naming the file and the place."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror or e}")
    except json.JSONDecodeError as e:
        raise PlotError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}")
    except UnicodeDecodeError as e:
        raise PlotError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})")


def _x_axis(group):
    """x values and label for a workload's points: the one parameter that
    varies when only one does (a numeric axis), else the points in order of
    their work, labelled by size."""
    keys = [k for k in group[0]["params"] if all(k in p["params"] for p in group)]
    varying = [k for k in keys if len({p["params"][k] for p in group}) > 1]
    if len(group) > 1 and len(varying) == 1 and all(isinstance(p["params"][varying[0]], (int, float)) for p in group):
        k = varying[0]
        group.sort(key=lambda p: p["params"][k])
        return [p["params"][k] for p in group], k, None
    group.sort(key=lambda p: p["flops"])
    return list(range(len(group))), "size (" + ("x".join(keys) if keys else "case") + ")", [p["size"] for p in group]


def plot_report(points, out=None, title=""):
    """GFLOP/s against size, one panel per workload, a line per series (only
    where the x axis is one parameter: other shapes are not a series and get
    markers alone); out None: the Figure."""
    if out is not None:
        output_format(out)
    plt = _pyplot(out)
    groups = {}
    for p in points:
        groups.setdefault(p["workload"], []).append(p)
    n = len(groups)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False, constrained_layout=True)
    styles = ["o-", "s--", "^-.", "D:", "v-", "P--"]
    names = []
    for p in points:
        names += [s for s in p["series"] if s not in names]
    for ax, (workload, group) in zip(axes.flat, groups.items()):
        xs, xlabel, ticks = _x_axis(group)
        for s in names:
            pts = [(x, p["series"][s]) for x, p in zip(xs, group) if p["series"].get(s)]
            if pts:  # a series keeps its colour and style in every panel
                i = names.index(s)
                style = styles[i % len(styles)]
                if ticks:  # unrelated shapes in order of work: no line joins them
                    style = style[0]
                ax.plot([x for x, _ in pts], [y for _, y in pts], style, color=f"C{i % 10}",
                        label=s, gid=_gid(s), markersize=6)
        if ticks:
            ax.set_xticks(xs)
            ax.set_xticklabels(ticks, rotation=20 if len(ticks) > 2 else 0, fontsize="small")
            ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.set_title(workload)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("GFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return _save(fig, out, plt)


# ---- roofline -------------------------------------------------------------------------------

def _bandwidth(bench):
    """The memory bandwidth a bench file measured, GB/s, and how: bench/cpu/run's
    STREAM triad (`bandwidth_gbps`) or bench/gpu's device copy (`copy`); None."""
    if isinstance(bench.get("bandwidth_gbps"), (int, float)) and bench["bandwidth_gbps"] > 0:
        return bench["bandwidth_gbps"], "STREAM triad"
    copy = bench.get("copy")
    if isinstance(copy, dict) and isinstance(copy.get("gbps"), (int, float)) and copy["gbps"] > 0:
        return copy["gbps"], copy.get("impl") or "device copy"
    return None


def measured_peaks(bench, where="bench file"):
    """Ceilings measured on the machine, from a bench result file: (GFLOP/s,
    GB/s, what they are).  The bandwidth is the file's memory-bandwidth
    measurement; the compute ceiling is the fastest GFLOP/s any implementation
    reached in it (a library GEMM, as a rule): an attained ceiling, at or under
    the hardware's peak."""
    bw = _bandwidth(bench) if isinstance(bench, dict) else None
    if bw is None:
        raise PlotError(f"{where}: no measured memory bandwidth in it (bench/cpu/run's \"bandwidth_gbps\" or "
                        "bench/gpu's \"copy\"): give the peaks with --peaks GFLOPS,GBPS")
    best = max(((g, name, p) for p in report_points(bench, where) for name, g in p["series"].items()),
               key=lambda x: x[0])
    return best[0], bw[0], (f"measured in {os.path.basename(where)}: {bw[1]}, "
                            f"and {best[1]} on {best[2]['workload']} {best[2]['size']}")


def roofline_data(client, target=None, peaks=None, measured=None):
    """The ceilings and the best verified record of every workload on the
    target (default: the daemon's): [{name, intensity, gflops}].  The
    ceilings are `peaks` = (GFLOP/s, GB/s) when given, else `measured`
    (measured_peaks' result) when given, else the target file's (target.list)."""
    targets = client.call("target.list")["targets"]
    t = next((x for x in targets if (x["name"] == target if target else x.get("default"))), None)
    if t is None:
        raise PlotError(f"unknown target {target!r}: the daemon knows {', '.join(x['name'] for x in targets)}")
    if peaks:
        (pg, pb), source = peaks, "given"
    elif measured:
        pg, pb, source = measured
    else:
        pg, pb, source = t.get("peak_gflops") or 0, t.get("peak_gbps") or 0, "the target file's peaks"
    if not (pg > 0 and pb > 0):
        raise PlotError(f"target {t['name']} has no peaks in its target file (peak_gflops {pg:g}, peak_gbps {pb:g}): "
                        "give them with --peaks GFLOPS,GBPS, or take them measured from a bench result with "
                        "--report BENCH.json (bench/cpu/run's STREAM bandwidth and fastest GFLOP/s)")
    points, offset = [], 0
    while True:
        ws = client.call("db.workloads", limit=1000, offset=offset)["workloads"]
        for w in ws:
            if not w["records"] or not w["bytes"] or not w["flops"]:
                continue
            best = client.call("db.best", workload=w["hash"], target=t["name"], k=1)["records"]
            if best and best[0].get("gflops"):
                points.append({"name": f"{w['name']} {_size(w['params'])}", "intensity": w["flops"] / w["bytes"],
                               "gflops": best[0]["gflops"]})
        if len(ws) < 1000:
            break
        offset += len(ws)
    if not points:
        raise PlotError(f"no verified records on target {t['name']} to place under its roofline")
    return {"target": t["name"], "peak_gflops": pg, "peak_gbps": pb, "source": source, "points": points}


def plot_roofline(data, out=None):
    """Log-log roofline: min(peak FLOP/s, bandwidth x intensity) and the
    points; out None: the Figure."""
    if out is not None:
        output_format(out)
    plt = _pyplot(out)
    pg, pb, pts = data["peak_gflops"], data["peak_gbps"], data["points"]
    ridge = pg / pb
    lo = min([p["intensity"] for p in pts] + [ridge]) / 10
    hi = max([p["intensity"] for p in pts] + [ridge]) * 10
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(8, 6), constrained_layout=True)
    ax.plot(xs, [min(pg, pb * x) for x in xs], color="black", linewidth=2,
            label=f"roofline: {pg:.4g} GFLOP/s, {pb:.4g} GB/s (ridge {ridge:.3g} FLOP/B)\n"
                  f"({data.get('source') or 'given'})", gid="series-roofline")
    ax.scatter([p["intensity"] for p in pts], [p["gflops"] for p in pts], s=40, color="tab:blue", zorder=3,
               label="best verified record per workload", gid="series-records")
    placed = []  # labels of nearby points are stacked, not drawn over each other
    for p in sorted(pts, key=lambda p: (p["intensity"], p["gflops"])):
        near = sum(1 for q in placed if abs(math.log(q["intensity"] / p["intensity"])) < 0.35 and
                   abs(math.log(q["gflops"] / p["gflops"])) < 0.35)
        placed.append(p)
        ax.annotate(p["name"], (p["intensity"], p["gflops"]), textcoords="offset points", xytext=(5, 4 + 9 * near),
                    fontsize="x-small")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_ylim(min([p["gflops"] for p in pts] + [pb * lo]) / 2, pg * 2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"roofline of {data['target']}: the best of {len(pts)} workload{'s' if len(pts) > 1 else ''}")
    return _save(fig, out, plt)


# ---- command line ----------------------------------------------------------------------------

def _peaks(text):
    try:
        g, b = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GFLOPS,GBPS (two numbers, e.g. 66900,3350)")
    if not (g > 0 and b > 0 and math.isfinite(g) and math.isfinite(b)):
        raise argparse.ArgumentTypeError(f"{text!r}: the peaks must be positive")
    return g, b


def _parser(prog):
    p = argparse.ArgumentParser(prog=prog, description="Pictures of tuning, drawn with matplotlib.")
    sub = p.add_subparsers(dest="what", required=True)
    j = sub.add_parser("job", help="a job's tuning curve")
    j.add_argument("job", type=int)
    j.add_argument("--report", metavar="BENCH.json", help="library baselines of the job's workload from this file")
    r = sub.add_parser("report", help="GFLOP/s against size from a bench result file")
    r.add_argument("bench", metavar="BENCH.json")
    f = sub.add_parser("roofline", help="the best records against the target's peaks")
    f.add_argument("--target", help="target name (default: the daemon's)")
    ceilings = f.add_mutually_exclusive_group()
    ceilings.add_argument("--peaks", type=_peaks, metavar="GFLOPS,GBPS", help="peaks to use instead of the target file's")
    ceilings.add_argument("--report", metavar="BENCH.json",
                   help="ceilings measured in this bench result (its bandwidth, its fastest GFLOP/s) instead of "
                        "the target file's")
    for s in (j, r, f):
        s.add_argument("-o", "--output", required=True, metavar="FILE.png|FILE.svg")
        s.add_argument("--socket", help="the daemon's socket (default: libtuned's)")
    return p


def main(argv=None, prog="python3 -m tuned.plot"):
    """Draws what argv asks; prints the file written.  0, or 1 after a message on stderr."""
    a = _parser(prog).parse_args(argv)
    try:
        output_format(a.output)
        if a.what == "report":
            done = plot_report(report_points(read_bench(a.bench), a.bench), a.output,
                               f"GFLOP/s by size: {os.path.basename(a.bench)}")
        else:
            from .client import Client
            with Client(a.socket) as c:
                if a.what == "job":
                    data = job_data(c, a.job)
                    lib = library_lines(read_bench(a.report), data["job"]["workload"]) if a.report else ()
                    if a.report and not lib:
                        print(f"{prog}: note: {a.report} has no library baseline of workload "
                              f"{data['job']['workload']} (no row with that hash): none drawn", file=sys.stderr)
                    done = plot_job(data, a.output, lib)
                else:
                    measured = measured_peaks(read_bench(a.report), a.report) if a.report else None
                    done = plot_roofline(roofline_data(c, a.target, a.peaks, measured), a.output)
    except Error as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
