#!/usr/bin/env python3
"""soak.py — tuned under a long mixed load: whether memory, open files, temp files and the
database stay flat (bench/README.md, "soak").

Starts its own PostgreSQL server (as bench/queue_daemons.py does) and --daemons tuned daemons of
target cpu on one database (each with a TMPDIR of its own, so that its temp files can be
counted).  --clients client threads then, until --minutes have passed, each in a loop: ask
queries (server.info, tune.list, tune.status, db.best, kernel.get), submit a small job and
watch it to its end, submit one and cancel it, or open a connection and drop it mid-request
or mid-watch (a killed client).  At most --jobs jobs are in flight at a time.  Every --kill-every
seconds a random build or measure process of a daemon is SIGKILLed; every --restart-every
seconds every daemon but the first (the steady one) is stopped (SIGTERM and SIGKILL in turn)
and started again.

It samples every 5 s, per daemon: resident memory (VmRSS), open file descriptors, threads and
entries under its TMPDIR, and writes a row every --sample seconds with the lowest of each (what
stays, not a job's passing peak), the database's size and the job and record counts (CSV and an
SVG plot in --out).  Three rows are quiet: after a warm-up job per daemon, at the middle and at
the end (the load paused and every job over).

It fails (exit 1) when, over the last half of the run, the steady daemon's memory or open files
grow faster than --max-growth per cent per hour (a least-squares trend), when a quiet daemon
holds more open files (the steady one) or TMPDIR entries (any) at the end than at the middle,
or when a job failed.  The database grows with the jobs' rows (kept for their history): its
growth per job is reported, not judged.

  bench/soak.py [--build build] [--minutes 60] [--sample 60] [--clients 64] [--out soak-out]
  bench/soak.py --minutes 3 --sample 10 --clients 16 --max-growth 200   # minutes, for CI
"""
import argparse
import glob
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import queue_daemons as qd  # noqa: E402  (its PostgreSQL server and JSON-RPC helpers)

ROOT = qd.ROOT
FINAL = ("done", "failed", "cancelled")


class Daemon:
    """One tuned of the soak: its socket, TMPDIR, log and process."""

    def __init__(self, build, db, tmp, i):
        self.i = i
        self.name = f"soak-{i}"
        self.sock = os.path.join(tmp, f"d{i}.sock")
        self.tmpdir = os.path.join(tmp, f"d{i}-tmp")
        os.makedirs(self.tmpdir, exist_ok=True)
        self.log = os.path.join(tmp, f"d{i}.log")
        self.args = [os.path.join(build, "daemon", "tuned"), "--target", "cpu", "--db", db, "--socket", self.sock,
                     "--lease", "10", "--jobs", "2", "--name", self.name, "--log-level", "info"]
        self.env = dict(os.environ, TUNED_CONFIG_DIR=os.path.join(ROOT, "configs"), TMPDIR=self.tmpdir)
        self.proc = None
        self.restarts = 0

    def start(self):
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.i} exited with {self.proc.returncode} at start (see {self.log})")
            try:
                qd.rpc(self.sock, "server.info", {})
                return
            except (OSError, RuntimeError, ValueError):
                time.sleep(0.1)
        raise RuntimeError(f"daemon {self.i} did not answer on {self.sock} (see {self.log})")

    def stop(self, sig=signal.SIGTERM):
        """Stops it with sig; its exit status (after SIGTERM, not 0 when jobs outlived --stop-timeout)."""
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def children(self):
        pids = []
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            if int(st[st.rindex(")") + 2:].split()[1]) == self.proc.pid:
                pids.append(int(e))
        return pids

    def sample(self):
        pid = self.proc.pid
        rss = threads = 0
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        threads = int(line.split()[1])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return None
        temps = sum(len(dirs) + len(files) for _, dirs, files in os.walk(self.tmpdir))
        return {"rss_kb": rss, "fds": fds, "threads": threads, "temps": temps}


def watch(sock, job, drop_after=None):
    """tune.watch until the job ends (or, drop_after seconds in, close the connection as a killed
    client would); the last state seen."""
    state = None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(600)
        s.connect(sock)
        s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tune.watch", "params": {"job": job}}) +
                   "\n").encode())
        t0, buf = time.time(), b""
        while True:
            if drop_after is not None and time.time() - t0 > drop_after:
                return state
            chunk = s.recv(65536)
            if not chunk:
                return state
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                obj = msg.get("result") or msg.get("params") or {}
                state = obj.get("state", state)
                if state in FINAL:
                    return state


class Load:
    """The clients' shared state: counters and the jobs in flight."""

    def __init__(self, args, daemons):
        self.args = args
        self.daemons = daemons
        self.stop = threading.Event()
        self.pause = threading.Event()  # set: the clients finish what they do and wait
        self.active = 0
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(args.jobs)
        self.counts = {k: 0 for k in ("queries", "submitted", "watched", "cancelled", "dropped", "errors",
                                      "worker_kills", "restarts", "slow_stops")}
        self.jobs = []
        self.hashes = []
        self.text = open(os.path.join(ROOT, "workloads", "matmul.tw")).read()
        self.last_error = ""

    def count(self, k, n=1):
        with self.lock:
            self.counts[k] += n

    def sock(self):
        d = random.choice(self.daemons)
        return d.sock

    def query(self, rng):
        sock = self.sock()
        with self.lock:
            job = rng.choice(self.jobs) if self.jobs else None
            h = rng.choice(self.hashes) if self.hashes else None
        choice = rng.randrange(5)
        if choice == 0:
            qd.rpc(sock, "server.info", {})
        elif choice == 1:
            qd.rpc(sock, "tune.list", {"limit": 5})
        elif choice == 2 and job:
            qd.rpc(sock, "tune.status", {"job": job})
        elif choice == 3 and h:
            qd.rpc(sock, "db.best", {"workload": h, "target": "cpu"})
        elif h:
            try:
                qd.rpc(sock, "kernel.get", {"workload": h, "target": "cpu"})
            except RuntimeError:  # no kernel yet: an answer all the same
                pass
        self.count("queries")

    def job(self, rng):
        if not self.slots.acquire(timeout=1):
            return self.query(rng)
        try:
            size = rng.choice((16, 24, 32))  # a few shapes: records and workloads repeat
            params = {"workload": self.text, "name": "matmul", "params": {"M": size, "N": size, "K": size},
                      "trials": 4, "batch_size": 2, "population": 64, "remeasure": 2,
                      "seed": rng.randrange(1 << 30)}
            sock = self.sock()
            r = qd.rpc(sock, "tune.submit", params)
            self.count("submitted")
            with self.lock:
                self.jobs = (self.jobs + [r["job"]])[-256:]
                if r["workload"] not in self.hashes:
                    self.hashes.append(r["workload"])
            how = rng.randrange(3)
            if how == 0:  # cancelled a little later
                time.sleep(rng.random() * 3)
                qd.rpc(self.sock(), "tune.cancel", {"job": r["job"]})
                self.count("cancelled")
                watch(self.sock(), r["job"])
            elif how == 1:  # a watcher killed midway, then another to the end
                watch(self.sock(), r["job"], drop_after=rng.random() * 2)
                self.count("dropped")
                watch(self.sock(), r["job"])
            else:
                watch(sock, r["job"])
            self.count("watched")
        finally:
            self.slots.release()

    def drop(self, rng):
        """A client killed mid-request: half a line, then the connection closed."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.sock())
            s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tune.li')
        self.count("dropped")

    def busy(self):
        with self.lock:
            return self.active > 0

    def client(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            if self.pause.is_set():
                time.sleep(0.2)
                continue
            with self.lock:
                self.active += 1
            try:
                r = rng.random()
                if r < 0.08:
                    self.job(rng)
                elif r < 0.12:
                    self.drop(rng)
                else:
                    self.query(rng)
            except (OSError, RuntimeError, ValueError) as e:  # a daemon restarting, a dropped watch
                self.count("errors")
                self.last_error = str(e)[:200]
                time.sleep(0.5)
            finally:
                with self.lock:
                    self.active -= 1
            time.sleep(rng.uniform(0.2, 1.5))

    def chaos(self):
        """Worker kills and daemon restarts on their schedules."""
        rng = random.Random(1)
        next_kill = time.time() + self.args.kill_every
        next_restart = time.time() + self.args.restart_every
        while not self.stop.wait(0.5):
            if self.pause.is_set():
                continue
            try:
                next_kill, next_restart = self.chaos_step(rng, next_kill, next_restart)
            except Exception as e:  # noqa: BLE001  (said, and the chaos goes on)
                self.count("errors")
                self.last_error = f"chaos: {e}"[:200]

    def chaos_step(self, rng, next_kill, next_restart):
        """One look at the kill and restart schedules; the next times."""
        if time.time() >= next_kill:
            next_kill += self.args.kill_every
            d = rng.choice(self.daemons)
            kids = d.children()
            if kids:
                try:
                    os.kill(rng.choice(kids), signal.SIGKILL)
                    self.count("worker_kills")
                except OSError:
                    pass
        if time.time() >= next_restart and len(self.daemons) > 1:
            next_restart += self.args.restart_every
            for d in self.daemons[1:]:
                d.restarts += 1
                sig = signal.SIGKILL if d.restarts % 2 == 0 else signal.SIGTERM
                if d.stop(sig) != 0 and sig == signal.SIGTERM:  # jobs outlived --stop-timeout: they resume
                    self.count("slow_stops")
                d.start()
                self.count("restarts")
        return next_kill, next_restart


def warm_up(daemons):
    """One job through each daemon to its end: what a daemon opens once and keeps (its readers'
    connections, the cost model, the build pool's directories) is there before the first
    quiet sample."""
    text = open(os.path.join(ROOT, "workloads", "matmul.tw")).read()
    for d in daemons:
        job = qd.rpc(d.sock, "tune.submit", {"workload": text, "name": "matmul", "params": {"M": 16, "N": 16, "K": 16},
                                             "trials": 2, "batch_size": 2, "population": 64})["job"]
        state = watch(d.sock, job)
        if state != "done":
            sys.exit(f"soak: the warm-up job {job} through daemon {d.i} ended {state} (see {d.log})")
    time.sleep(2)


def db_figures(bindir, tmp, name):
    out = subprocess.run(qd.as_postgres([f"{bindir}/psql", "-h", tmp, "-U", "postgres", "-d", name, "-At", "-c",
                                         f"SELECT pg_database_size('{name}'), "
                                         "(SELECT count(*) FROM jobs), (SELECT count(*) FROM records)"]),
                         capture_output=True, text=True, check=True).stdout.strip().split("|")
    return int(out[0]), int(out[1]), int(out[2])


def trend_per_hour(ts, ys):
    """Least-squares slope of ys over ts (seconds), in per cent of their mean per hour."""
    n = len(ts)
    if n < 3:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0 or my == 0:
        return 0.0
    slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var
    return slope * 3600 / my * 100


def svg_plot(rows, path, ndaemons):
    """Four panels (RSS, fds, temp entries, database MB) against minutes, one line per series."""
    panels = [("RSS (MiB)", [(f"d{i}", lambda r, i=i: r.get(f"d{i}_rss_kb", 0) / 1024) for i in range(ndaemons)]),
              ("open fds", [(f"d{i}", lambda r, i=i: r.get(f"d{i}_fds", 0)) for i in range(ndaemons)]),
              ("TMPDIR entries", [(f"d{i}", lambda r, i=i: r.get(f"d{i}_temps", 0)) for i in range(ndaemons)]),
              ("database (MiB)", [("db", lambda r: r["db_bytes"] / 2**20)])]
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    w, h, pad = 420, 220, 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{2 * h}" font-family="sans-serif" '
           'font-size="11">']
    tmax = max(r["t_min"] for r in rows) or 1
    for k, (title, series) in enumerate(panels):
        x0, y0 = (k % 2) * w, (k // 2) * h
        vals = [f(r) for _, f in series for r in rows]
        vmax = max(vals) * 1.1 or 1
        out.append(f'<text x="{x0 + pad}" y="{y0 + 15}">{title} (max {max(vals):.1f})</text>')
        out.append(f'<rect x="{x0 + pad}" y="{y0 + 20}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="none" '
                   'stroke="#999"/>')
        out.append(f'<text x="{x0 + pad}" y="{y0 + h - 8}">0</text><text x="{x0 + w - pad - 30}" y="{y0 + h - 8}">'
                   f'{tmax:.0f} min</text>')
        for j, (label, f) in enumerate(series):
            pts = " ".join(f"{x0 + pad + (r['t_min'] / tmax) * (w - 2 * pad):.1f},"
                           f"{y0 + 20 + (h - 2 * pad) * (1 - f(r) / vmax):.1f}" for r in rows)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colours[j % 4]}" stroke-width="1.5"/>')
            out.append(f'<text x="{x0 + w - pad - 40}" y="{y0 + 35 + 12 * j}" fill="{colours[j % 4]}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--sample", type=float, default=60, help="seconds between samples")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--daemons", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=3, help="jobs in flight at most")
    ap.add_argument("--kill-every", type=float, default=20, help="seconds between worker kills")
    ap.add_argument("--restart-every", type=float, default=600, help="seconds between daemon restarts")
    ap.add_argument("--max-growth", type=float, default=1.0, help="per cent per hour over the last half")
    ap.add_argument("--fd-slack", type=int, default=0,
                    help="open files the steady daemon may hold more at the end than at the middle (a short run's "
                    "reader pool may still grow)")
    ap.add_argument("--out", default="soak-out")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.build, "daemon", "tuned")):
        sys.exit(f"soak: no {args.build}/daemon/tuned (meson compile -C {args.build})")
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        print("soak: SKIPPED: no PostgreSQL server binaries (install the postgresql package: scripts/install-deps)")
        sys.exit(77)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="tuned-soak-")
    os.chmod(tmp, 0o755)
    bindir, data = qd.start_pg(tmp)
    daemons = []
    failures = []
    try:
        db = qd.createdb(bindir, tmp, "soak")
        daemons = [Daemon(args.build, db, tmp, i) for i in range(args.daemons)]
        for d in daemons:
            d.start()
        warm_up(daemons)
        load = Load(args, daemons)
        threads = [threading.Thread(target=load.client, args=(i,), daemon=True) for i in range(args.clients)]
        threads.append(threading.Thread(target=load.chaos, daemon=True))
        rows, t0 = [], time.time()
        csv = open(os.path.join(args.out, "soak.csv"), "w")
        header = None
        print(f"soak: {args.daemons} daemons, {args.clients} clients, {args.minutes:g} min, a sample every "
              f"{args.sample:g} s, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)

        def take(phase, lows):
            """A row: per daemon the lowest of each figure since the last row (what stays, not a job's
            passing peak), the database's figures and the load's counters."""
            nonlocal header
            row = {"t_min": round((time.time() - t0) / 60, 2), "phase": phase}
            for d in daemons:
                for k, v in lows.get(d.i, {}).items():
                    row[f"d{d.i}_{k}"] = v
            row["db_bytes"], row["jobs"], row["records"] = db_figures(bindir, tmp, "soak")
            row.update(load.counts)
            rows.append(row)
            if header is None:
                header = list(row)
                csv.write(",".join(header) + "\n")
            csv.write(",".join(str(row.get(k, "")) for k in header) + "\n")
            csv.flush()
            print("  " + " ".join(f"{k}={row.get(k, '')}" for k in header), flush=True)
            return row

        def lows_until(end):
            """Samples every 5 s until end; per daemon the lowest of each figure."""
            lows = {}
            while True:
                for d in daemons:
                    s = d.sample()
                    for k, v in (s or {}).items():
                        lows.setdefault(d.i, {})[k] = min(v, lows.get(d.i, {}).get(k, v))
                if time.time() >= end:
                    return lows
                time.sleep(max(0.0, min(5.0, end - time.time())))

        def quiet(phase):
            """The load paused, the jobs ended: a row of quiet figures."""
            load.pause.set()
            while load.busy():
                time.sleep(0.5)
            deadline = time.time() + 600
            while time.time() < deadline:
                unfinished = sum(len(qd.rpc(daemons[0].sock, "tune.list", {"state": st, "limit": 1})["jobs"])
                                 for st in ("running", "queued"))
                if not unfinished:
                    break
                time.sleep(2)
            row = take(phase, lows_until(time.time() + 5))
            load.pause.clear()
            return row

        quiet("warm")
        for t in threads:
            t.start()
        mid = None
        while time.time() - t0 < args.minutes * 60:
            take("load", lows_until(min(time.time() + args.sample, t0 + args.minutes * 60)))
            if mid is None and time.time() - t0 >= args.minutes * 30:
                mid = quiet("mid")
        load.stop.set()
        for t in threads:
            t.join(timeout=900)
        end = quiet("end")
        csv.close()
        svg_plot(rows, os.path.join(args.out, "soak.svg"), args.daemons)

        half = [r for r in rows if r["phase"] == "load" and r["t_min"] >= args.minutes / 2]
        ts = [r["t_min"] * 60 for r in half]
        judged = args.minutes >= 40  # a shorter half is noise: one job's arena more or less
        for k in ("rss_kb", "fds"):
            g = trend_per_hour(ts, [r[f"d0_{k}"] for r in half])
            print(f"soak: the steady daemon's {k} (lowest per sample) over the last half: {g:+.2f} %/hour"
                  f"{'' if judged else ' (not judged: a run under 40 minutes)'}")
            if judged and g > args.max_growth:
                failures.append(f"the steady daemon's {k} grows {g:+.2f} %/hour over the last half "
                                f"(limit {args.max_growth:g})")
        # quiet figures at the middle and at the end: what is left once the jobs are over
        for d in daemons:
            a = {k: mid.get(f"d{d.i}_{k}") for k in ("rss_kb", "fds", "threads", "temps")}
            b = {k: end.get(f"d{d.i}_{k}") for k in ("rss_kb", "fds", "threads", "temps")}
            print(f"soak: daemon {d.i} quiet at the middle: {a}; at the end: {b}"
                  f"{f' ({d.restarts} restarts)' if d.restarts else ''}")
            if d.i == 0 and b["fds"] > a["fds"] + args.fd_slack:
                failures.append(f"the steady daemon holds {b['fds']} fds at the end, {a['fds']} at the middle")
            if b["temps"] > a["temps"]:
                failures.append(f"daemon {d.i} leaves {b['temps']} TMPDIR entries, {a['temps']} at the middle")
        first, last = rows[0], end
        jobs = max(last["jobs"] - first["jobs"], 1)
        print(f"soak: database {first['db_bytes'] / 2**20:.1f} -> {last['db_bytes'] / 2**20:.1f} MiB over "
              f"{last['jobs']} jobs ({(last['db_bytes'] - first['db_bytes']) / jobs / 1024:.1f} KiB per job), "
              f"{last['records']} records")
        print("soak: " + ", ".join(f"{k} {v}" for k, v in load.counts.items()) +
              (f" (last error: {load.last_error})" if load.last_error else ""))
        st = qd.rpc(daemons[0].sock, "tune.list", {"state": "failed", "limit": 5})["jobs"]
        if st:
            failures.append(f"{len(st)}+ jobs failed, e.g. job {st[0]['job']}: {st[0].get('error')}")
        for d in daemons:
            st = d.stop()
            if st != 0:
                failures.append(f"daemon {d.i} exited with {st} after SIGTERM at the end, every job over (see {d.log})")
    finally:
        for d in daemons:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
        subprocess.run(qd.as_postgres([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not failures:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"soak: FAIL: {f}")
    print(f"soak: {'FAIL' if failures else 'ok'} (figures in {args.out}/soak.csv, plot {args.out}/soak.svg)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
