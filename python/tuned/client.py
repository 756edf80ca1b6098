"""client.py — tuned.Client: a connection to the tuned daemon through
libtuned (submit, watch, status, cancel, best, records, kernel and any
other method), with the daemon's answers as Python objects."""

import ctypes
import dataclasses
import json
import os
import queue
import re
import threading
import warnings

from . import _lib
from ._errors import Error
from ._progress import Progress

# a workload hash (64 hex digits) or a prefix of one of at least 32, as tables show it
_HASH = re.compile(r"^[0-9a-fA-F]{32,64}$")


@dataclasses.dataclass
class Job:
    """A tuning job as libtuned reports it (tuned_job_t)."""
    id: int
    state: str                 # queued, running, done, cancelled, failed
    workload: str              # the workload's hash
    name: str
    target: str
    trials: int
    trials_done: int
    seconds: float
    best_record: int | None    # None: no verified kernel yet
    best_median_secs: float | None
    best_gflops: float | None
    failures: dict
    error: str | None
    baseline_median_secs: float | None  # the unscheduled program; None: not measured (yet)
    baseline_gflops: float | None
    # the first failed trial: {"trial", "status", "error"}; None: none failed
    first_failure: dict | None = None

    @property
    def finished(self):
        return self.state in ("done", "cancelled", "failed")

    @classmethod
    def _from(cls, s):
        best = s.best_record or None
        base = s.baseline_median_secs or None
        return cls(id=s.id, state=_lib.decode(s.state_name), workload=_lib.decode(s.workload),
                   name=_lib.decode(s.name), target=_lib.decode(s.target), trials=s.trials,
                   trials_done=s.trials_done, seconds=s.seconds, best_record=best,
                   best_median_secs=s.best_median_secs if best else None,
                   best_gflops=s.best_gflops if best else None,
                   failures={"build_error": s.build_errors, "run_error": s.run_errors, "timeout": s.timeouts,
                             "wrong_result": s.wrong_results, "too_slow": s.too_slow},
                   error=_lib.decode(s.error) or None, baseline_median_secs=base,
                   baseline_gflops=s.baseline_gflops if base else None,
                   first_failure={"trial": s.first_failure_trial, "status": _lib.decode(s.first_failure_status),
                                  "error": _lib.decode(s.first_failure)} if s.first_failure_trial else None)

    def __str__(self):
        """The line tunectl prints for a job."""
        text = f"job {self.id}: {self.state}, {self.trials_done}/{self.trials} trials"
        if self.best_record:
            text += (f", best {self.best_median_secs * 1e6:.2f} us ({self.best_gflops:.2f} GFLOP/s, "
                     f"record {self.best_record})")
        if self.error:
            text += f": {self.error}"
        return text


@dataclasses.dataclass
class Launch:
    """One kernel launch of a tuned kernel (tuned_launch_t)."""
    name: str
    grid: tuple
    block: tuple
    shared_bytes: int
    static_shared_bytes: int
    # TMA tensor maps the kernel takes after the params (tuned_tensor_map_t): dicts with name, param (index),
    # dims, stride_bytes, box, swizzle
    tensor_maps: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Param:
    """One argument of a tuned kernel (tuned_param_t), in call order."""
    name: str
    dtype: str                 # float32, float16, int32, ...
    shape: tuple
    role: str                  # input, output, workspace (scratch the caller allocates) or packed
    elements: int              # to allocate (a packed copy's rows may be padded)
    elem_bytes: int
    packs: str = None          # role packed: the const input it holds, filled by pack_function(input, copy)
    pack_function: str = None


@dataclasses.dataclass
class Kernel:
    """The best kernel of a workload on a target (tuned_kernel_t)."""
    record: int
    workload: str
    name: str
    target: str
    language: str              # c, cuda or opencl
    entry: str
    source: str
    median_secs: float
    gflops: float
    launches: list
    params: list
    ptx: str | None
    cubin: bytes | None
    launch: dict
    trace: object
    fallback: dict | None = None  # kernel(fallback="nearest"): the record's own workload, params, time
    # the unscheduled program served instead of a slower best record (record 0): {"median_secs",
    # "best_record", "best_median_secs"}
    unscheduled: dict | None = None

    @classmethod
    def _from(cls, k):
        launches = [Launch(_lib.decode(l.name), tuple(l.grid), tuple(l.block), l.shared_bytes,
                           l.static_shared_bytes,
                           [{"name": _lib.decode(m.name), "param": m.param, "dims": tuple(m.dims),
                             "stride_bytes": m.stride_bytes, "box": tuple(m.box), "swizzle": m.swizzle}
                            for m in l.tensor_maps[:l.ntensor_maps]])
                    for l in k.kernels[:k.nkernels]]
        params = [Param(_lib.decode(p.name), _lib.decode(p.dtype), tuple(p.shape[:p.ndim]), _lib.decode(p.role),
                        p.elements, p.elem_bytes, _lib.decode(p.packs), _lib.decode(p.pack_function))
                  for p in k.params[:k.nparams]]
        cubin = ctypes.string_at(k.cubin, k.cubin_size) if k.cubin else None
        return cls(record=k.record, workload=_lib.decode(k.workload), name=_lib.decode(k.name),
                   target=_lib.decode(k.target), language=_lib.decode(k.language), entry=_lib.decode(k.entry),
                   source=_lib.decode(k.source), median_secs=k.median_secs, gflops=k.gflops, launches=launches,
                   params=params, ptx=_lib.decode(k.ptx), cubin=cubin,
                   launch=json.loads(k.launch_json) if k.launch_json else {},
                   trace=json.loads(k.trace_json) if k.trace_json else None,
                   fallback=json.loads(k.fallback_json) if k.fallback_json else None,
                   unscheduled=json.loads(k.unscheduled_json) if k.unscheduled_json else None)


@dataclasses.dataclass
class Workload:
    """A workload named by the caller: its hash, or its text and a name."""
    hash: str | None = None
    text: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, workload, params):
        """A path to a .tw file (str or os.PathLike), its text, or its hash (64 hex digits, or the
        first 32 or more)."""
        if isinstance(workload, os.PathLike) or (isinstance(workload, str) and "\n" not in workload and
                                                  not _HASH.match(workload) and os.path.isfile(workload)):
            path = os.fspath(workload)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            return cls(text=text, name=re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.splitext(os.path.basename(path))[0]))
        if not isinstance(workload, str):
            raise TypeError(f"workload must be a path, the workload's text or its hash, not {type(workload).__name__}")
        if _HASH.match(workload):
            if params:
                raise Error(f"parameters ({', '.join(params)}) apply to a workload's text, not to its hash "
                            f"{workload}: the hash names one instance already")
            return cls(hash=workload.lower())
        if "\n" not in workload and "=" not in workload:
            raise Error(f"workload {workload!r}: no such file, and neither a workload hash (32 to 64 hex "
                        "digits) nor workload text")
        return cls(text=workload)


def _params_json(params):
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise Error(f"workload parameter {k}={v!r}: parameters are integers (e.g. M=64)")
    return json.dumps(params) if params else None


class Client:
    """One connection to the tuned daemon.  `socket`: its path (None: the
    daemon's default, $TUNED_SOCKET or $XDG_RUNTIME_DIR/tuned/tuned.sock);
    `timeout`: seconds to wait for each answer (None: forever).  Use from one
    thread at a time; `with tuned.Client() as c:` closes it."""

    def __init__(self, socket=None, timeout=None):
        self._c = None
        lib = _lib.lib()
        handle, err = ctypes.c_void_p(), _lib.ErrorStruct()
        _lib.check(lib.tuned_connect(_lib.encode(os.fspath(socket) if socket else None), ctypes.byref(handle),
                                     ctypes.byref(err)), err)
        self._c = handle
        self.socket = _lib.decode(lib.tuned_socket_path(handle))
        self.timeout = timeout
        if timeout:
            lib.tuned_set_timeout(handle, float(timeout))

    def close(self):
        if self._c:
            _lib.lib().tuned_close(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _handle(self):
        if not self._c:
            raise Error("this tuned.Client is closed")
        return self._c

    def call(self, method, **params):
        """Calls any daemon method (docs/protocol.md) with its params; the
        result as Python objects."""
        out, err = ctypes.c_void_p(), _lib.ErrorStruct()
        rc = _lib.lib().tuned_call(self._handle(), method.encode(), _lib.encode(json.dumps(params)) if params else None,
                                   ctypes.byref(out), ctypes.byref(err))
        text = _lib.take_string(out.value)
        _lib.check(rc, err)
        return json.loads(text)

    def info(self):
        """server.info: version, target, database, backends, ..."""
        return self.call("server.info")

    def targets(self):
        """target.list: every known target and whether this machine can measure for it."""
        return self.call("target.list")["targets"]

    def check(self, workload, **params):
        """workload.check: the workload's hash, parameters, tensors, FLOPs and bytes."""
        w = Workload.of(workload, params)
        if w.hash:
            raise Error("check takes the workload's text or file, not its hash")
        args = {"workload_text": w.text, "params": params} if params else {"workload_text": w.text}
        if w.name:
            args["name"] = w.name
        return self.call("workload.check", **args)

    def workload_hash(self, workload, **params):
        """The structural hash the workload's records are stored under."""
        w = Workload.of(workload, params)
        if w.hash:
            return w.hash
        out, err = (ctypes.c_char * _lib.HASH_SIZE)(), _lib.ErrorStruct()
        _lib.check(_lib.require("tuned_workload_hash")(self._handle(), _lib.encode(w.text),
                                                       _lib.encode(_params_json(params)), out, ctypes.byref(err)), err)
        return out.value.decode()

    def submit(self, workload, target=None, *, trials=None, seconds=None, seed=None, name=None, strategy=None,
               model=None, remeasure=None, baseline=None, allow_tf32=False, **params):
        """Submits a tuning job for a workload (a .tw path or its text) with
        parameter overrides (M=64, ...); returns the job id (the workload's
        hash is then in self.last_workload).  Unset options take the
        daemon's defaults.  allow_tf32: the target (given or the daemon's)
        becomes TARGET+tf32, where float32 matmuls may use TF32 tensor cores."""
        w = Workload.of(workload, params)
        if w.hash:
            raise Error("submit takes the workload's text or file, not its hash")
        lib = _lib.lib()
        s = lib.tuned_submit_defaults()
        keep = [_lib.encode(w.text), _lib.encode(name or w.name), _lib.encode(_params_json(params)),
                _lib.encode(target), _lib.encode(strategy), _lib.encode(model)]
        s.workload, s.name, s.params_json, s.target, s.strategy, s.model = keep
        s.trials = int(trials or 0)
        s.seconds = float(seconds or 0)
        if seed is not None:
            s.seed = int(seed)
        if remeasure is not None:
            s.remeasure = int(remeasure)
        if baseline is not None:
            s.baseline = 1 if baseline else 0
        s.allow_tf32 = 1 if allow_tf32 else 0
        job, hsh, err = ctypes.c_int64(), (ctypes.c_char * _lib.HASH_SIZE)(), _lib.ErrorStruct()
        _lib.check(lib.tuned_submit(self._handle(), ctypes.byref(s), ctypes.byref(job), hsh, ctypes.byref(err)), err)
        self.last_workload = hsh.value.decode()
        return job.value

    def status(self, job):
        """The job now (a Job)."""
        out, err = _lib.JobStruct(), _lib.ErrorStruct()
        _lib.check(_lib.lib().tuned_job_status(self._handle(), int(job), ctypes.byref(out), ctypes.byref(err)), err)
        return Job._from(out)

    def cancel(self, job):
        """Stops a job once its running batch is committed; returns it."""
        out, err = _lib.JobStruct(), _lib.ErrorStruct()
        _lib.check(_lib.lib().tuned_cancel(self._handle(), int(job), ctypes.byref(out), ctypes.byref(err)), err)
        return Job._from(out)

    def jobs(self, state=None, limit=None):
        """tune.list: jobs, newest first, as the daemon's objects."""
        args = {k: v for k, v in (("state", state), ("limit", limit)) if v is not None}
        return self.call("tune.list", **args)["jobs"]

    def watch(self, job, progress=True, file=None, timeout=None):
        """Follows a job until it is done, cancelled or failed and returns
        its final Job.  progress: a progress bar when `file` (default
        sys.stdout) is a terminal (tqdm's when installed), one line per
        measured batch otherwise; False: quiet; a callable: called with each
        Job instead.  timeout: seconds (None: no limit).  Ctrl-C stops
        watching (the job keeps running)."""
        # libtuned's wait blocks in C: it runs on a thread with a connection
        # of its own, so that this thread draws the progress and Ctrl-C
        # reaches it.
        updates = queue.Queue()
        socket = self.socket

        def wait():
            lib = _lib.lib()
            handle, err, final = ctypes.c_void_p(), _lib.ErrorStruct(), _lib.JobStruct()
            rc = lib.tuned_connect(_lib.encode(socket), ctypes.byref(handle), ctypes.byref(err))
            if rc == 0:
                callback = _lib.PROGRESS_FN(lambda j, ctx: updates.put(("job", Job._from(j.contents))))
                rc = lib.tuned_wait(handle, int(job), float(timeout or 0), callback, None, ctypes.byref(final),
                                    ctypes.byref(err))
                lib.tuned_close(handle)
            updates.put(("end", rc, err, Job._from(final) if rc == 0 else None))

        threading.Thread(target=wait, name=f"tuned-watch-{job}", daemon=True).start()
        show = progress if callable(progress) else Progress(file, enabled=bool(progress))
        try:
            while True:
                item = updates.get()
                if item[0] == "job":
                    show(item[1])
                    continue
                _, rc, err, final = item
                _lib.check(rc, err)
                show(final)
                return final
        finally:
            if not callable(progress):
                show.close()

    def best(self, workload, target=None, k=1, **params):
        """db.best: the k fastest verified records (dicts, fastest first) of a
        workload (path, text or hash) on a target (None: the daemon's)."""
        args = {"workload": self.workload_hash(workload, **params), "k": int(k)}
        if target:
            args["target"] = target
        return self.call("db.best", **args)["records"]

    def records(self, workload=None, target=None, status=None, limit=None, **params):
        """db.records: the records (dicts) of a workload (None: every
        workload), optionally of one target and status."""
        args = {k: v for k, v in (("target", target), ("status", status), ("limit", limit)) if v is not None}
        if workload is not None:
            args["workload"] = self.workload_hash(workload, **params)
        elif params:
            raise Error("parameters need a workload")
        return self.call("db.records", **args)["records"]

    def kernel(self, workload, target=None, fallback=None, **params):
        """kernel.get: the best kernel (a Kernel) of a workload (path, text or
        hash) on a target (None: the daemon's): source, launches, params.
        fallback="nearest" (a path or text): a shape never tuned gets the best
        record of the nearest tuned shape of the same text, verified and timed
        on this shape by the daemon; Kernel.fallback then says which."""
        if fallback not in (None, "none", "nearest"):
            raise ValueError(f"fallback must be None, 'none' or 'nearest', not {fallback!r}")
        w = Workload.of(workload, params)
        lib, out, err = _lib.lib(), ctypes.POINTER(_lib.KernelStruct)(), _lib.ErrorStruct()
        if fallback == "nearest":
            if w.hash:
                raise ValueError("fallback='nearest' needs the workload's path or text, not a hash")
            rc = lib.tuned_kernel_get_nearest(self._handle(), _lib.encode(w.text), _lib.encode(_params_json(params)),
                                              _lib.encode(target), 1, ctypes.byref(out), ctypes.byref(err))
        elif w.hash:
            rc = lib.tuned_kernel_get(self._handle(), _lib.encode(w.hash), _lib.encode(target), ctypes.byref(out),
                                      ctypes.byref(err))
        else:
            rc = lib.tuned_kernel_get_text(self._handle(), _lib.encode(w.text), _lib.encode(_params_json(params)),
                                           _lib.encode(target), ctypes.byref(out), ctypes.byref(err))
        _lib.check(rc, err)
        try:
            k = Kernel._from(out.contents)
        finally:
            lib.tuned_kernel_free(out)
        if k.fallback and k.fallback.get("slower_than_unscheduled"):
            warnings.warn(f"tuned: the nearest-shape fallback (record {k.fallback.get('record')}) takes "
                          f"{k.median_secs * 1e3:.4g} ms on this shape, slower than its unscheduled program "
                          f"({k.fallback['unscheduled_median_secs'] * 1e3:.4g} ms): tune this shape", RuntimeWarning,
                          stacklevel=2)
        return k
