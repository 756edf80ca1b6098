"""test_plot.py — tuned.plot and `tunectl plot` against a real daemon and the
repository's bench results and pretuned H100 records: the files are real PNGs and SVGs of the
expected size whose plot areas hold the series' colours, SVGs that parse
and name their series, the data behind them equal to the daemon's and the
bench file's figures, and bad input answered with a clear message."""

import json
import os
import struct
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import MATMUL, ROOT, SHAPE
import tuned

pytest.importorskip("matplotlib", reason="matplotlib draws the plots: apt-get install python3-matplotlib "
                                         "(scripts/install-deps) or pip install matplotlib")
from PIL import Image  # noqa: E402  (matplotlib's own dependency, an independent PNG reader)

from tuned import plot  # noqa: E402

QUICK = os.path.join(ROOT, "bench", "cpu", "results", "2026-11-26-quick-t64.json")
GPU = os.path.join(ROOT, "bench", "gpu", "h100-2026-11-26", "run1", "baselines.json")
SVG_NS = "{http://www.w3.org/2000/svg}"


def png_size(path):
    """(width, height) from the PNG's signature and IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG: {head[:8]!r}"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def pixels(path, box):
    """The RGB pixels of the part box = (x0, y0, x1, y1) (fractions of its
    width and height) of a PNG."""
    img = Image.open(path).convert("RGB")
    w, h = img.size
    return list(img.crop((int(box[0] * w), int(box[1] * h), int(box[2] * w), int(box[3] * h))).getdata())


def drawn(px):
    """Pixels that are not the white background (nor the light grid)."""
    return sum(1 for p in px if min(p) < 200)


# Hues of matplotlib's default colours, whatever their transparency over white.
HUES = {"blue": lambda r, g, b: b > r + 50 and b > g + 20,       # tab:blue: candidates, tuned
        "green": lambda r, g, b: g > r + 50 and g > b + 50,      # tab:green: best so far
        "orange": lambda r, g, b: r > b + 100 and r > g + 40,    # tab:orange: unscheduled (report)
        "gray": lambda r, g, b: max(r, g, b) - min(r, g, b) < 8 and 100 <= r <= 170,
        "black": lambda r, g, b: max(r, g, b) < 60}


def hue_count(px, hue):
    return sum(1 for p in px if HUES[hue](*p))


def svg_ids_and_text(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG_NS + "svg"
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    text = " ".join("".join(e.itertext()) for e in root.iter(SVG_NS + "text"))
    return root, ids, text


def tunectl():
    """$TUNECTL (meson test), else the tunectl beside the libtuned in use."""
    path = os.environ.get("TUNECTL") or os.path.join(os.path.dirname(tuned.lib_path()), "tunectl")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no tunectl at {path}: set TUNECTL=/path/to/build/client/tunectl")
    return path


def run_tunectl(*args, env=None):
    return subprocess.run([tunectl(), *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


# ---- the tuning curve ------------------------------------------------------------------

def test_job_trials_are_the_jobs_records(tuned_matmul):
    sock, job = tuned_matmul
    with tuned.Client(sock) as c:
        data = plot.job_data(c, job.id)
        records = {r["id"]: r for r in c.records(MATMUL, **SHAPE)}
    trials = data["trials"]
    assert [t["trial"] for t in trials] == list(range(1, 9))
    assert data["job"]["job"] == job.id and data["job"]["trials_done"] == 8
    assert len({t["record"] for t in trials}) == 8 and all(t["record"] in records for t in trials)
    for t in trials:
        r = records[t["record"]]
        assert t["status"] == r["status"]
        assert 0 <= t["elapsed_s"] <= data["job"]["finished"] - data["job"]["started"] + 1e-3
        if t["status"] == "ok":  # what the search measured (a re-measure changes only the record)
            assert t["gflops"] > 0 and t["median_secs"] > 0
            assert t["gflops"] == pytest.approx(r["gflops"] * r["median_secs"] / t["median_secs"], rel=1e-9)
    best = max(t["gflops"] for t in trials if t["status"] == "ok")
    assert best >= job.best_gflops * 0.2  # the re-measured best is the same kernel, timed again


def test_job_curve_png_and_svg(tuned_matmul, tmp_path, capsys):
    sock, job = tuned_matmul
    png, svg = str(tmp_path / "curve.png"), str(tmp_path / "curve.svg")
    assert plot.main(["job", str(job.id), "-o", png, "--socket", sock]) == 0
    assert f"wrote {png} (png, 1300x500 px)" in capsys.readouterr().out
    assert png_size(png) == (1300, 500)
    # the panels' plot areas (from 0.055 to 0.905 of the height, from the top), less
    # the tick labels: a level 1 % above the x axis is inside, and so is a best so far
    # that was the first trial's (5 % under the top, in the margin matplotlib adds)
    left = pixels(png, (0.08, 0.06, 0.48, 0.895))  # the trials panel's
    right = pixels(png, (0.56, 0.06, 0.98, 0.895))  # the wall-time panel's
    for px in (left, right):
        assert 1000 < drawn(px) < 0.6 * len(px)
        assert hue_count(px, "blue") > 100, "no candidates drawn"
        assert hue_count(px, "green") > 150, "no best-so-far line drawn"
        assert hue_count(px, "gray") > 100, "no unscheduled-program line drawn"
    assert plot.main(["job", str(job.id), "-o", svg, "--socket", sock]) == 0
    root, ids, text = svg_ids_and_text(svg)
    assert root.get("width") == "936pt" and root.get("height") == "360pt"
    assert {"series-candidates", "series-best", "series-unscheduled"} <= ids
    assert "best so far" in text and "unscheduled program" in text and "trial (candidates measured)" in text
    assert f"job {job.id}: matmul on cpu" in text


def test_job_curve_failures_and_order(tmp_path):
    """Failed candidates are crosses along the bottom; the best so far over
    wall time follows the time order (a failed build's time is its batch's
    commit, after the runs measured beside it)."""
    job = {"job": 4, "state": "done", "name": "mm", "workload": "0" * 16, "target": "cpu", "trials": 6,
           "trials_done": 6, "best": {"gflops": 9.0}, "baseline": {"gflops": 1.0}}
    trials = [{"trial": 1, "status": "ok", "gflops": 2.0, "elapsed_s": 1.0},
              {"trial": 2, "status": "build_error", "gflops": None, "elapsed_s": 3.0},
              {"trial": 3, "status": "ok", "gflops": 9.0, "elapsed_s": 2.0},
              {"trial": 4, "status": "timeout", "gflops": None, "elapsed_s": 3.0},
              {"trial": 5, "status": "ok", "gflops": 4.0, "elapsed_s": 4.0},
              {"trial": 6, "status": "wrong_result", "gflops": None, "elapsed_s": 5.0}]
    png, svg = str(tmp_path / "f.png"), str(tmp_path / "f.svg")
    plot.plot_job({"job": job, "trials": trials}, png)
    px = pixels(png, (0.04, 0.8, 0.98, 0.92))  # the bottom strip of both panels
    red = sum(1 for r, g, b in px if r > 180 and g < 80 and b < 80)
    assert red > 40, "no failed candidates drawn"
    plot.plot_job({"job": job, "trials": trials}, svg)
    root, ids, text = svg_ids_and_text(svg)
    assert "series-failed" in ids and "candidate (failed: build_error, timeout, wrong_result)" in text
    steps = [e for e in root.iter() if e.get("id") == "series-best"]
    assert len(steps) == 2  # one per panel
    for g in steps:
        d = next(e for e in g.iter(SVG_NS + "path")).get("d").replace("M", " ").replace("L", " ").split()
        xs, ys = [float(v) for v in d[0::2]], [float(v) for v in d[1::2]]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True), d  # rightwards, never down
    with pytest.raises(plot.PlotError, match="job 4 has no measured candidates to plot"):
        plot.plot_job({"job": job, "trials": []}, png)


def test_figures_for_notebooks(tmp_path):
    """Without an output file the plots return their matplotlib Figure (a
    notebook shows it); unrelated shapes are markers, not a line; the time
    axis says what came before the first batch."""
    job = {"job": 4, "state": "done", "name": "mm", "workload": "0" * 16, "target": "cpu", "trials": 2,
           "trials_done": 2, "best": {"gflops": 9.0}, "baseline": {"gflops": 1.0}}
    trials = [{"trial": 1, "status": "ok", "gflops": 2.0, "elapsed_s": 18.0},
              {"trial": 2, "status": "ok", "gflops": 9.0, "elapsed_s": 19.0}]
    fig = plot.plot_job({"job": job, "trials": trials})
    assert type(fig).__name__ == "Figure" and len(fig.axes) == 2
    assert "the first batch ended at 18 s" in fig.axes[1].get_xlabel()
    points = plot.report_points(plot.read_bench(QUICK))
    fig = plot.plot_report(points, title="quick")
    for ax in fig.axes:
        if ax.get_visible() and ax.get_xlabel().startswith("size ("):  # shapes in order of work
            assert all(line.get_linestyle() in ("None", "") for line in ax.get_lines()), ax.get_title()
    assert not list(tmp_path.iterdir())  # nothing written


def test_tunectl_plot(tuned_matmul, tmp_path):
    sock, job = tuned_matmul
    svg = str(tmp_path / "t.svg")
    r = run_tunectl("--socket", sock, "plot", str(job.id), "-o", svg)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wrote {svg} (svg, 1300x500 px)"
    assert "series-best" in svg_ids_and_text(svg)[1]
    png = str(tmp_path / "roof.png")
    r = run_tunectl("--socket", sock, "plot", "--roofline", "--peaks", "200,40", "-o", png)
    assert r.returncode == 0, r.stderr
    assert png_size(png) == (800, 600)
    # a bench file for the job's library baselines: the row of its workload, by hash
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [{"case": "mm", "workload": "matmul", "params": SHAPE, "hash": job.workload,
                                           "flops": 2 * 32 * 48 * 40,
                                           "baseline": {"baseline": "cblas_sgemm", "gflops_workload": 7.5}}]}))
    r = run_tunectl("--socket", sock, "plot", str(job.id), "--report", str(bench), "-o", svg)
    assert r.returncode == 0, r.stderr
    root, ids, text = svg_ids_and_text(svg)
    assert "series-library-cblas-sgemm" in ids and "cblas_sgemm (7.5 GFLOP/s)" in text


def test_tunectl_plot_errors(tuned_matmul, tmp_path):
    sock, job = tuned_matmul
    out = str(tmp_path / "x.png")
    r = run_tunectl("--socket", sock, "plot", "999999", "-o", out)
    assert r.returncode == 1 and "tunectl plot: no job 999999 (tune.list shows the jobs)" in r.stderr
    r = run_tunectl("--socket", sock, "plot", str(job.id), "-o", str(tmp_path / "x.jpg"))
    assert r.returncode == 1
    assert "unknown suffix '.jpg': the format follows the suffix, one of .png, .svg" in r.stderr
    r = run_tunectl("--socket", sock, "plot", "-o", out)
    assert r.returncode == 2 and "nothing to plot: give a JOB, --report BENCH.json or --roofline" in r.stderr
    r = run_tunectl("--socket", sock, "plot", str(job.id), "--roofline", "-o", out)
    assert r.returncode == 2 and "are different pictures: give one" in r.stderr
    r = run_tunectl("--socket", sock, "plot", str(job.id))
    assert r.returncode == 2 and "missing -o" in r.stderr
    r = run_tunectl("--socket", sock, "plot", "--roofline", "-o", out)  # the cpu target has no peaks
    assert r.returncode == 1 and "target cpu has no peaks in its target file" in r.stderr and "--peaks" in r.stderr
    r = run_tunectl("--socket", sock, "plot", "--roofline", "--peaks", "12", "-o", out)
    assert r.returncode == 2 and "expected GFLOPS,GBPS" in r.stderr
    r = run_tunectl("--socket", sock, "plot", str(job.id), "-o", out, env={"TUNED_PYTHON": "/nonexistent/python3"})
    assert r.returncode == 1 and "$TUNED_PYTHON (/nonexistent/python3) does not run, or has no matplotlib" in r.stderr
    assert not os.path.exists(out)


# ---- bench reports ------------------------------------------------------------------------

def test_report_points_follow_the_bench_file():
    with open(QUICK) as f:
        bench = json.load(f)
    pts = plot.report_points(bench, QUICK)
    assert [p["workload"] for p in pts] == [r["workload"] for r in bench["rows"]]
    row, p = bench["rows"][0], pts[0]
    assert p["size"] == "1024x1024x1024"
    assert p["series"]["tuned"] == row["rerun"]["gflops"]
    assert p["series"]["cblas_sgemm"] == row["baseline"]["gflops_workload"]
    assert p["series"]["TVM MetaSchedule"] == row["tvm"]["gflops_workload"]
    assert p["series"]["unscheduled"] == pytest.approx(row["flops"] / row["tuned"]["naive_secs"] * 1e-9)
    # tunectl bench --json's results, and bench/gpu's baselines
    results = {"suite": "s", "results": [{"name": "matmul", "params": {"M": 128}, "found": True, "gflops": 3.0,
                                          "median_secs": 1e-3}, {"name": "matmul", "params": {"M": 256},
                                                                 "found": False, "gflops": 0, "median_secs": 0}]}
    assert [p["series"] for p in plot.report_points(results)] == [{"tuned": 3.0}]
    with open(GPU) as f:
        gpu = plot.report_points(json.load(f), GPU)
    assert {(p["workload"], p["size"]) for p in gpu} == {("matmul", "1024"), ("conv2d", "1x64x56x56x64")}
    assert set(gpu[0]["series"]) == {"torch (cuBLAS)", "triton (autotune)"}


def test_report_png_and_svg(tmp_path):
    png, svg = str(tmp_path / "r.png"), str(tmp_path / "r.svg")
    r = run_tunectl("plot", "--report", QUICK, "-o", png)  # no daemon needed
    assert r.returncode == 0, r.stderr
    w, h = png_size(png)
    assert (w, h) == (1560, 420)  # three panels: matmul, gemv, softmax
    px = pixels(png, (0.03, 0.12, 0.32, 0.8))  # matmul's panel: four series over three sizes
    assert 2000 < drawn(px) < 0.6 * len(px)
    assert hue_count(px, "blue") > 100 and hue_count(px, "orange") > 100
    assert plot.main(["report", QUICK, "-o", svg]) == 0
    root, ids, text = svg_ids_and_text(svg)
    assert {"series-tuned", "series-unscheduled", "series-cblas-sgemm", "series-tvm-metaschedule",
            "series-cblas-sgemv"} <= ids
    for s in ("matmul", "gemv", "softmax", "GFLOP/s", "size (MxNxK)", "127x131x137"):
        assert s in text, s
    assert plot.main(["report", GPU, "-o", str(tmp_path / "g.png")]) == 0


def test_report_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": [\n  {"case": 1,}\n]}')
    assert plot.main(["report", str(bad), "-o", str(tmp_path / "x.png")]) == 1
    assert f"{bad}:2:14: not JSON: Expecting property name enclosed in double quotes" in capsys.readouterr().err
    for text, msg in (('[1, 2]', "not a bench result: a JSON object was expected, got list"),
                      ('{"suite": "x"}', "not a bench result: expected \"rows\" (bench/cpu/run)"),
                      ('{"rows": [{"case": "x"}]}', "rows[0] has no \"workload\" name"),
                      ('{"rows": [{"workload": "mm", "tuned": {}}]}', "no GFLOP/s figures to plot")):
        bad.write_text(text)
        assert plot.main(["report", str(bad), "-o", str(tmp_path / "x.svg")]) == 1
        assert f"{bad}: {msg}" in capsys.readouterr().err
    assert plot.main(["report", str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.png")]) == 1
    assert "missing.json: No such file or directory" in capsys.readouterr().err
    assert plot.main(["report", QUICK, "-o", str(tmp_path / "x.pdf")]) == 1
    assert "unknown suffix '.pdf'" in capsys.readouterr().err
    assert plot.main(["report", QUICK, "-o", str(tmp_path / "no-dir" / "x.png")]) == 1
    assert "no-dir/x.png: No such file or directory" in capsys.readouterr().err
    assert not list(tmp_path.glob("x.*"))


# ---- roofline -----------------------------------------------------------------------------

def test_roofline(tuned_matmul, tmp_path):
    sock, job = tuned_matmul
    with tuned.Client(sock) as c:
        data = plot.roofline_data(c, peaks=(200.0, 40.0))
        check = c.check(MATMUL, **SHAPE)
        with pytest.raises(plot.PlotError, match="target cpu has no peaks in its target file"):
            plot.roofline_data(c)
        with pytest.raises(plot.PlotError, match="unknown target 'nvidia/h1000'"):
            plot.roofline_data(c, "nvidia/h1000", (1.0, 1.0))
        best = c.best(MATMUL, **SHAPE)[0]
    assert data["target"] == "cpu" and data["peak_gflops"] == 200.0
    p = next(p for p in data["points"] if p["name"] == "matmul 32x48x40")
    assert p["intensity"] == pytest.approx(check["flops"] / check["bytes"])
    assert p["gflops"] == pytest.approx(best["gflops"])
    png = str(tmp_path / "roof.png")
    plot.plot_roofline(data, png)
    assert png_size(png) == (800, 600)
    px = pixels(png, (0.1, 0.08, 0.97, 0.88))
    assert hue_count(px, "black") > 300, "no roofline drawn"
    assert hue_count(px, "blue") > 30, "no record drawn"


def test_roofline_measured_ceilings(tuned_matmul, tmp_path):
    """--report: the ceilings a bench run measured (its bandwidth, the fastest
    GFLOP/s in it) for a target file without peaks (cpu's)."""
    sock, job = tuned_matmul
    with open(QUICK) as f:
        bench = json.load(f)
    fastest = max(max((r.get("rerun") or {}).get("gflops") or 0, (r.get("tuned") or {}).get("gflops") or 0,
                      r["baseline"].get("gflops_workload") or 0, (r.get("tvm") or {}).get("gflops_workload") or 0)
                  for r in bench["rows"])
    g, b, source = plot.measured_peaks(bench, QUICK)
    assert (g, b) == (pytest.approx(fastest), bench["bandwidth_gbps"])
    assert source.startswith("measured in 2026-11-26-quick-t64.json: STREAM triad, and ")
    with open(GPU) as f:
        gpu = json.load(f)
    g, b, source = plot.measured_peaks(gpu, GPU)
    assert b == gpu["copy"]["gbps"] and "device copy" in source
    assert g == max(i["gflops"] for impls in gpu["cases"].values() for i in impls if i.get("gflops"))
    with pytest.raises(plot.PlotError, match="no measured memory bandwidth in it"):
        plot.measured_peaks({"results": [{"name": "matmul", "found": True, "gflops": 3.0, "median_secs": 1.0}]})
    svg = str(tmp_path / "roof.svg")
    r = run_tunectl("--socket", sock, "plot", "--roofline", "--report", QUICK, "-o", svg)
    assert r.returncode == 0, r.stderr
    root, ids, text = svg_ids_and_text(svg)
    assert {"series-roofline", "series-records"} <= ids
    assert f"{bench['bandwidth_gbps']:.4g} GB/s" in text and "measured in 2026-11-26-quick-t64.json" in text
    r = run_tunectl("--socket", sock, "plot", "--roofline", "--peaks", "200,40", "--report", QUICK, "-o", svg)
    assert r.returncode == 2 and "--peaks and --report are two sources of the roofline's ceilings" in r.stderr


def test_roofline_of_pretuned_h100_records(daemon, tmp_path):
    """The H100 records shipped in configs/pretuned (imported: each replayed
    and checked by the daemon, no GPU needed) under the nvidia/h100 target
    file's own peaks, through tunectl."""
    pretuned = os.path.join(ROOT, "configs", "pretuned", "nvidia-h100.jsonl")
    with tuned.Client(daemon) as c:
        with open(pretuned) as f:
            c.call("db.import", jsonl=f.read())
        h100 = next(t for t in c.targets() if t["name"] == "nvidia/h100")
        data = plot.roofline_data(c, "nvidia/h100")
    assert (data["peak_gflops"], data["peak_gbps"]) == (h100["peak_gflops"], h100["peak_gbps"])
    assert h100["peak_gflops"] > 10000 and h100["peak_gbps"] > 1000  # the target file's figures
    names = {p["name"].split()[0] for p in data["points"]}
    assert {"matmul", "softmax", "conv2d"} <= names
    for p in data["points"]:
        assert p["gflops"] <= data["peak_gflops"] * 4  # fp16/bf16 tensor cores go past the fp32 peak, not far
    soft = next(p for p in data["points"] if p["name"].startswith("softmax"))
    assert soft["intensity"] < data["peak_gflops"] / data["peak_gbps"]  # memory-bound: left of the ridge
    assert soft["gflops"] <= soft["intensity"] * data["peak_gbps"] * 1.05
    svg = str(tmp_path / "h100.svg")
    r = run_tunectl("--socket", daemon, "plot", "--roofline", "--target", "nvidia/h100", "-o", svg)
    assert r.returncode == 0, r.stderr
    root, ids, text = svg_ids_and_text(svg)
    assert {"series-roofline", "series-records"} <= ids
    assert f"the best of {len(data['points'])} workloads" in text and "softmax 4096x4096" in text
