#!/usr/bin/env python3
"""queue_daemons.py — one job tuned end to end by 1, 2 and 4 tuned daemons sharing a PostgreSQL
database (the shared job queue, docs/scale-out.md) against one daemon on SQLite, in one run.

Starts its own PostgreSQL server (initdb in /tmp, unix socket only, fsync off, as the postgres
user when run as root, like tests/pgtest.h), then for each configuration starts the daemons
(own sockets, worker pools and names, target cpu), submits one matmul job of --trials
candidates in batches of --batch to the first daemon over JSON-RPC, waits until the job is
done and prints the wall time, batches per second and seconds per trial.  The daemons share the
machine's cores: on a small machine more daemons measure the queue's overhead, not a speed-up.

  bench/queue_daemons.py [--build build] [--trials 48] [--batch 8] [--size 32] [--daemons 1,2,4]
"""
import argparse
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def as_postgres(cmd):
    return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd


def start_pg(tmp):
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        sys.exit("queue_daemons: no PostgreSQL server binaries (install the postgresql package)")
    bindir = os.path.dirname(bins[-1])
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(tmp, pw.pw_uid, pw.pw_gid)
    data = os.path.join(tmp, "data")
    subprocess.run(as_postgres([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--locale=C",
                                "-E", "UTF8", "--no-sync"]), check=True, stdout=subprocess.DEVNULL)
    opts = f"-c listen_addresses='' -c unix_socket_directories={tmp} -c fsync=off -c max_connections=200"
    subprocess.run(as_postgres([f"{bindir}/pg_ctl", "-D", data, "-l", os.path.join(tmp, "server.log"), "-w", "-t",
                                "60", "-o", opts, "start"]), check=True, stdout=subprocess.DEVNULL)
    return bindir, data


def createdb(bindir, tmp, name):
    subprocess.run(as_postgres([f"{bindir}/psql", "-h", tmp, "-U", "postgres", "-q", "-c",
                                f"CREATE DATABASE {name}"]), check=True, stdout=subprocess.DEVNULL)
    return f"postgresql:///{name}?host={tmp}&user=postgres"


def rpc(path, method, params):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    reply = json.loads(buf)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


def start_daemons(build, db, n, tmp, tag):
    procs, socks = [], []
    env = dict(os.environ, TUNED_CONFIG_DIR=os.path.join(ROOT, "configs"))
    for i in range(n):
        sock = os.path.join(tmp, f"{tag}-{i}.sock")
        log = open(os.path.join(tmp, f"{tag}-{i}.log"), "w")
        args = [os.path.join(build, "daemon", "tuned"), "--target", "cpu", "--db", db, "--socket", sock,
                "--lease", "10"]
        if db.startswith("postgresql://"):
            args += ["--name", f"{tag}-{i}"]
        procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env))
        socks.append(sock)
    for sock in socks:
        for _ in range(600):
            if os.path.exists(sock):
                try:
                    rpc(sock, "server.info", {})
                    break
                except OSError:
                    pass
            time.sleep(0.1)
        else:
            sys.exit(f"queue_daemons: no daemon on {sock} (see its log in {tmp})")
    return procs, socks


def run(build, db, n, tmp, tag, args):
    procs, socks = start_daemons(build, db, n, tmp, tag)
    text = open(os.path.join(ROOT, "workloads", "matmul.tw")).read()
    size = args.size
    params = {"workload": text, "name": "matmul", "params": {"M": size, "N": size, "K": size},
              "trials": args.trials, "batch_size": args.batch, "population": 64, "remeasure": 0,
              "baseline": False, "seed": 7}
    t0 = time.time()
    job = rpc(socks[0], "tune.submit", params)["job"]
    while True:
        st = rpc(socks[0], "tune.status", {"job": job})
        if st["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(0.2)
    wall = time.time() - t0
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=120)
    if st["state"] != "done" or st["trials_done"] != args.trials:
        sys.exit(f"queue_daemons: job {job} ended {st['state']} with {st['trials_done']} trials: {st.get('error')}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--daemons", default="1,2,4")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tuned-qbench-")
    os.chmod(tmp, 0o755)
    bindir, data = start_pg(tmp)
    batches = -(-args.trials // args.batch) + 1
    print(f"matmul {args.size}^3 on cpu, {args.trials} trials in batches of {args.batch} (+ the last), "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}\n")
    print("| engine     | daemons | wall (s) | batches/s | s/trial |")
    print("|------------|--------:|---------:|----------:|--------:|")
    try:
        configs = [("SQLite", 1)] + [("PostgreSQL", int(n)) for n in args.daemons.split(",")]
        for k, (engine, n) in enumerate(configs):
            tag = f"c{k}"
            db = os.path.join(tmp, f"{tag}.db") if engine == "SQLite" else createdb(bindir, tmp, f"queue_{k}")
            wall = run(args.build, db, n, tmp, tag, args)
            print(f"| {engine:<10} | {n:7d} | {wall:8.1f} | {batches / wall:9.2f} | {wall / args.trials:7.2f} |",
                  flush=True)
    finally:
        subprocess.run(as_postgres([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
