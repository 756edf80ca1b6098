"""local.py — tuned without a daemon: tune a workload in this process
(libtuned_local: the search, the builders and a tuned-worker process for the
runs, as `tunectl tune` does) into a SQLite database file, and serve its best
kernel from that file (tuned.load(..., db=PATH) runs it).

    import tuned
    r = tuned.tune("workloads/matmul.tw", "cpu", trials=32, M=128, N=128, K=128)
    mm = tuned.load("workloads/matmul.tw", "cpu", db=r.db, M=128, N=128, K=128)

The database defaults to $TUNED_DB, else ~/.cache/tuned/tuned.db
($XDG_CACHE_HOME/tuned/tuned.db)."""

import ctypes
import dataclasses
import json
import os
import sys

from . import _lib
from ._errors import Error
from .client import Kernel, Workload, _params_json


def _check(rc, err):
    """libtuned_local's errors: its TUNED_E_IO is the database or a worker
    process here, not a lost daemon connection (what it means to Client)."""
    if rc == -2:
        raise Error(err.message.decode("utf-8", "replace"), rc)
    _lib.check(rc, err)


def default_db():
    """The database file tune and load(db=True) use when given none."""
    env = os.environ.get("TUNED_DB")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.makedirs(os.path.join(base, "tuned"), exist_ok=True)
    return os.path.join(base, "tuned", "tuned.db")


@dataclasses.dataclass
class TuneResult:
    """What tune found: the best kernel's time (re-measured), its record in
    db, and the unscheduled program's time on the same target."""
    workload: str                    # the workload's hash
    name: str
    target: str
    db: str
    trials: int
    status_counts: dict
    best_median_secs: float | None   # None: no verified kernel
    best_record: int | None
    baseline_median_secs: float | None  # the unscheduled program
    elapsed_s: float

    @property
    def speedup(self):
        """The unscheduled program's time over the best's (None: either missing)."""
        if self.best_median_secs and self.baseline_median_secs:
            return self.baseline_median_secs / self.best_median_secs
        return None

    def __str__(self):
        best = (f"best {self.best_median_secs * 1e3:.4g} ms (record {self.best_record})" if self.best_median_secs
                else "no verified kernel")
        base = f", unscheduled {self.baseline_median_secs * 1e3:.4g} ms" if self.baseline_median_secs else ""
        return f"{self.name} on {self.target}: {self.trials} trials, {best}{base}, {self.elapsed_s:.1f} s"


def _text(workload, params):
    w = Workload.of(workload, params)
    if w.hash:
        raise ValueError("tuning takes the workload's path or text, not its hash")
    return w


def tune(workload, target="cpu", *, trials=32, seconds=None, seed=None, db=None, remeasure=None, name=None,
         progress=None, **params):
    """Tunes a workload (a .tw path or its text, with parameter overrides
    M=64, ...) on a target in this process, for `trials` measured candidates
    (and at most `seconds`), keeping every record in database file `db`
    (None: default_db()).  progress: None (quiet), True (a line per batch on
    stderr) or a callable given a dict (trials_done, trials_total,
    best_median_secs, elapsed_s).  Returns a TuneResult; tuned.Error
    subclasses for a bad workload (BadWorkload), a target this machine cannot
    run (TargetRefused) or a failure of the database or worker."""
    w = _text(workload, params)
    db = os.fspath(db) if db else default_db()
    local = _lib.local_lib()
    o = local.tuned_local_tune_defaults()
    keep = [_lib.encode(w.text), _lib.encode(name or w.name), _lib.encode(_params_json(params)),
            _lib.encode(target), _lib.encode(db)]
    o.workload_text, o.name, o.params_json, o.target, o.db_path = keep
    o.trials, o.seconds, o.seed = int(trials), float(seconds or 0), int(seed or 0)
    if remeasure is not None:
        o.remeasure = int(remeasure)
    failure = []

    def on_progress(text, _ctx):
        try:
            p = json.loads(text)
            if callable(progress):
                progress(p)
            elif progress:
                best = f"{p['best_median_secs'] * 1e3:.4g} ms" if p["best_median_secs"] else "none yet"
                print(f"{p['trials_done']}/{p['trials_total']} trials, best {best}, {p['elapsed_s']:.0f} s",
                      file=sys.stderr, flush=True)
        except BaseException as e:  # noqa: BLE001 — an exception cannot cross the C frames: kept, raised after
            failure.append(e)

    cb = _lib.LOCAL_PROGRESS_FN(on_progress) if progress else _lib.LOCAL_PROGRESS_FN()
    o.progress = cb
    out, err = ctypes.c_void_p(), _lib.ErrorStruct()
    rc = local.tuned_local_tune(ctypes.byref(o), ctypes.byref(out), ctypes.byref(err))
    text = _lib.take_local_string(out.value)
    _check(rc, err)
    if failure:
        raise failure[0]
    r = json.loads(text)
    best, naive = r.get("best"), r.get("naive")
    return TuneResult(workload=r["workload"], name=r["name"], target=r["target"], db=db, trials=r["trials"],
                      status_counts=r["status_counts"], best_median_secs=best["median_secs"] if best else None,
                      best_record=best.get("record_id") if best else None,
                      baseline_median_secs=naive.get("median_secs") if naive else None, elapsed_s=r["elapsed_s"])


def kernel(workload, target="cpu", *, db=None, **params):
    """The best kernel (a Kernel, as Client.kernel returns) of a workload
    (path, text or hash) on a target from database file `db` (None:
    default_db()), served as the daemon serves it — never a record slower
    than the unscheduled program measured there — without a daemon.
    tuned.NoKernel when nothing verified is there."""
    w = Workload.of(workload, params)
    db = os.fspath(db) if db else default_db()
    if not os.path.exists(db):
        from ._errors import NoKernel
        raise NoKernel(f"no tuned kernel yet: database {db} does not exist (tuned.tune a workload into it)",
                       -4, -32004)
    local, out, err = _lib.local_lib(), ctypes.c_void_p(), _lib.ErrorStruct()
    rc = local.tuned_local_kernel(_lib.encode(db), _lib.encode(w.text), _lib.encode(w.name),
                                  _lib.encode(_params_json(params)), _lib.encode(w.hash), _lib.encode(target),
                                  ctypes.byref(out), ctypes.byref(err))
    text = _lib.take_local_string(out.value)
    _check(rc, err)
    return kernel_from_json(text)


def kernel_from_json(text):
    """A Kernel from kernel.get's JSON (libtuned's parser)."""
    lib, k, err = _lib.lib(), ctypes.POINTER(_lib.KernelStruct)(), _lib.ErrorStruct()
    _lib.check(_lib.require("tuned_kernel_parse")(text.encode(), ctypes.byref(k), ctypes.byref(err)), err)
    try:
        return Kernel._from(k.contents)
    finally:
        lib.tuned_kernel_free(k)
