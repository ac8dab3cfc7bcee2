"""Worker processes that run fuzzed programs and survive whatever the programs do.

Each worker is a ``spawn``ed process with its own device (on the GPU: its own CUDA
context), started by :func:`_worker_main`: it builds the device, says ``ready``, then
runs one task at a time (:func:`numba_ws.fuzz.devices.run_program`) and sends back the
result. Its stdout / stderr go to ``<log_dir>/worker<i>.log`` (numba / CUDA messages
included), so a crash can be explained from the log's tail.

The parent (:class:`Pool`) notices, per task:

- a result -- and if the result is ``fatal`` (a CUDA error: the context is gone) the
  worker exits after sending it and is replaced;
- a dead process (illegal instruction, abort, ``os._exit``): outcome ``crash`` with the
  exit code and the log's tail; the worker is replaced;
- no result within ``timeout`` seconds of the task's start (a hung kernel, a runaway
  compile): the process is killed, outcome ``timeout``; the worker is replaced.

No failure of one task stops the others. A worker that dies before it is ready
``MAX_START_FAILURES`` times in a row stops the pool with its log's tail (no device,
CuPy missing ...).
"""
import multiprocessing as mp
import os
import pathlib
import sys
import time
from multiprocessing.connection import wait

MAX_START_FAILURES = 3


class PoolError(RuntimeError):
    """Workers cannot start (the device or its libraries are missing)."""


def _worker_main(conn, device_spec, log_path, home, kernel_dir, sys_path):
    sys.path[:] = sys_path
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from .. import knobs
    from .devices import make_device, run_program
    with knobs.scope(NUMBA_WS_HOME=home):
        device = make_device(device_spec)
        conn.send(("ready", device.info()))
        folder = pathlib.Path(kernel_dir)
        while True:
            task = conn.recv()
            if task is None:
                return
            print(f"-- task {task['id']}: seed {task['program']['seed']}", flush=True)
            result = run_program(task["program"], device, folder, task.get("data_seed"))
            sys.stdout.flush()
            conn.send(("result", task["id"], result))
            if result.get("fatal"):
                os._exit(0)


class _Worker:
    def __init__(self, index, pool):
        self.index, self.pool = index, pool
        self.log = pool.log_dir / f"worker{index}.log"
        parent, child = mp.get_context("spawn").Pipe()
        self.conn = parent
        self.proc = mp.get_context("spawn").Process(
            target=_worker_main, daemon=True,
            args=(child, pool.device_spec, str(self.log), pool.home, str(pool.kernel_dir),
                  list(sys.path)))
        self.proc.start()
        child.close()
        self.ready = False
        self.task = None
        self.started = None

    def tail(self, n=1500):
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, kill=False):
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


class Pool:
    """``jobs`` workers for ``device_spec``; tasks are {'id', 'program' (dict),
    'data_seed'}. :meth:`submit` queues, :meth:`poll` returns finished (task, result)."""

    def __init__(self, jobs, device_spec, timeout, log_dir, home=None):
        self.device_spec, self.timeout = device_spec, timeout
        self.log_dir = pathlib.Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.kernel_dir = self.log_dir / "kernels"
        self.kernel_dir.mkdir(exist_ok=True)
        self.home = home or str(self.log_dir / "cache")
        self.queue, self.start_failures, self.info = [], 0, None
        self.restarts = 0
        self.workers = [_Worker(i, self) for i in range(jobs)]

    @property
    def busy(self):
        return sum(w.task is not None for w in self.workers) + len(self.queue)

    def submit(self, task):
        self.queue.append(task)
        self._dispatch()

    def _dispatch(self):
        for w in self.workers:
            if w.ready and w.task is None and self.queue:
                w.task, w.started = self.queue.pop(0), time.monotonic()
                try:
                    w.conn.send(w.task)
                except (OSError, BrokenPipeError):
                    pass          # noticed as a dead process by poll()

    def _replace(self, w):
        self.restarts += 1
        w.stop(kill=True)
        self.workers[w.index] = _Worker(w.index, self)

    def poll(self, timeout=0.5):
        """Wait up to ``timeout`` s; [(task, result)] of the tasks that ended."""
        done = []
        objs = [w.conn for w in self.workers] + [w.proc.sentinel for w in self.workers]
        wait(objs, timeout)
        for w in list(self.workers):
            got = None
            try:
                while w.conn.poll():
                    msg = w.conn.recv()
                    if msg[0] == "ready":
                        w.ready, self.start_failures = True, 0
                        self.info = self.info or msg[1]
                    elif msg[0] == "result":
                        got = msg[2]
            except (EOFError, OSError):
                pass
            if got is not None and w.task is not None:
                done.append((w.task, got))
                w.task = None
                if got.get("fatal"):
                    self._replace(w)
                continue
            if not w.proc.is_alive():
                if w.task is not None:
                    code = w.proc.exitcode
                    done.append((w.task, {"seed": w.task["program"]["seed"],
                                          "outcome": "crash",
                                          "message": f"worker process died (exit code {code})",
                                          "log_tail": w.tail()}))
                elif not w.ready:
                    self.start_failures += 1
                    if self.start_failures >= MAX_START_FAILURES:
                        raise PoolError(f"workers for device {self.device_spec!r} do not "
                                        f"start; last log:\n{w.tail()}")
                self._replace(w)
                continue
            if w.task is not None and time.monotonic() - w.started > self.timeout:
                done.append((w.task, {"seed": w.task["program"]["seed"], "outcome": "timeout",
                                      "message": f"no result in {self.timeout:.0f} s (hang?); "
                                                 "process killed", "log_tail": w.tail()}))
                self._replace(w)
        self._dispatch()
        return done

    def abandon(self):
        """Drop queued tasks and kill workers with a task in flight; (tasks dropped)."""
        dropped = list(self.queue) + [w.task for w in self.workers if w.task is not None]
        self.queue = []
        for w in self.workers:
            if w.task is not None:
                w.task = None
                self._replace(w)
        return dropped

    def close(self):
        for w in self.workers:
            w.stop(kill=w.task is not None or not w.ready)
