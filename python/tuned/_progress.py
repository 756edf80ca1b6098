"""_progress.py — how Client.watch shows a job's progress: a bar redrawn in
place on a terminal (tqdm's when it is installed), one line per change
otherwise, as `tunectl watch` does."""

import sys


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """Called with each Job; close() ends the bar.  `file`: default
    sys.stdout; `use_tqdm`: None to use tqdm when importable."""

    WIDTH = 30

    def __init__(self, file=None, enabled=True, use_tqdm=None):
        self.file = file if file is not None else sys.stdout
        self.enabled = enabled
        isatty = getattr(self.file, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.tqdm_class = _tqdm() if self.tty and use_tqdm is not False else None
        self.bar = None
        self.last = None
        self.drawn = False

    def __call__(self, job):
        key = (job.state, job.trials_done, job.best_record)
        if not self.enabled or key == self.last:
            return
        self.last = key
        best = f"best {job.best_gflops:.2f} GFLOP/s" if job.best_record else "no kernel yet"
        if self.tty and self.tqdm_class:
            if self.bar is None:
                self.bar = self.tqdm_class(total=job.trials, desc=f"job {job.id}", unit="trial", file=self.file)
            self.bar.n = job.trials_done
            self.bar.set_postfix_str(f"{job.state}, {best}")
        elif self.tty:
            filled = self.WIDTH * job.trials_done // job.trials if job.trials else 0
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.file.write(f"\rjob {job.id} [{bar}] {job.trials_done}/{job.trials} trials, {job.state}, {best}\x1b[K")
            self.drawn = True
        else:
            self.file.write(f"{job}\n")
        self.file.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.drawn:
            self.file.write("\n")
            self.file.flush()
