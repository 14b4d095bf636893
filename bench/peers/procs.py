"""Processes: pinned runs with their own CPU time, CPU and memory accounting
of a server's whole process tree (cgroups when the kernel offers them), and
free ports on 127.0.0.1."""

import os
import signal
import socket
import subprocess
import tempfile
import time


class BenchError(Exception):
    """A runtime failure: the message names the problem and the fix."""


def free_port():
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=15.0):
    """Waits until 127.0.0.1:port accepts a connection or `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class Run:
    """What a finished client process did: its own CPU time (user + system,
    from wait4), wall time, exit status and output."""

    def __init__(self, argv, rc, user, system, wall, stdout, stderr, timed_out):
        self.argv = argv
        self.rc = rc
        self.user = user
        self.system = system
        self.wall = wall
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    @property
    def cpu(self):
        return self.user + self.system

    def check(self, what):
        if self.timed_out:
            raise BenchError(f"{what} did not finish in time: {' '.join(self.argv)}")
        if self.rc != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()[-5:]
            raise BenchError(
                f"{what} exited with status {self.rc}: {' '.join(self.argv)}\n  " + "\n  ".join(tail)
            )
        return self


def run_pinned(argv, cpu, timeout, sample=None):
    """Runs argv under `taskset -c cpu` (taskset execs it, so the rusage is
    the tool's own) and returns a Run. `sample(pid)` is called about every
    100 ms while it runs (for memory sampling)."""
    full = ["taskset", "-c", str(cpu)] + [str(a) for a in argv]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = start + timeout
        timed_out = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            if sample is not None:
                sample(proc.pid)
            time.sleep(0.01 if sample is None else 0.1)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(
            full,
            proc.returncode,
            ru.ru_utime,
            ru.ru_stime,
            wall,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            timed_out,
        )


def _mounts():
    with open("/proc/mounts") as f:
        return [line.split() for line in f]


class Group:
    """CPU time and memory of a server and every process it forks (Apache's
    children, nginx's workers), including processes that exited: a cgroup
    (v2 `cpu.stat`, or v1 `cpuacct`) when this kernel lets us make one,
    otherwise the live process tree from /proc (then exited children are
    missed)."""

    def __init__(self, name):
        self.path = None
        self.kind = "proctree"
        self.root_pid = None
        for m in _mounts():
            if m[2] == "cgroup2":
                p = os.path.join(m[1], f"tlslab-bench-{name}-{os.getpid()}")
                if self._try(p, "cpu.stat"):
                    self.kind = "cgroup2"
                    break
        if self.path is None:
            for m in _mounts():
                if m[2] == "cgroup" and "cpuacct" in m[3].split(","):
                    p = os.path.join(m[1], f"tlslab-bench-{name}-{os.getpid()}")
                    if self._try(p, "cpuacct.usage"):
                        self.kind = "cgroup1"
                        break

    def _try(self, path, probe):
        try:
            os.makedirs(path, exist_ok=True)
            if os.path.exists(os.path.join(path, probe)):
                self.path = path
                return True
            os.rmdir(path)
        except OSError:
            pass
        return False

    def enter(self):
        """Called in the child between fork and exec: joins the group."""
        if self.path is not None:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write("0")

    def pids(self):
        if self.path is not None:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        return _descendants(self.root_pid) if self.root_pid else []

    def cpu_ns(self):
        """CPU time of the group so far, in nanoseconds."""
        if self.kind == "cgroup2":
            with open(os.path.join(self.path, "cpu.stat")) as f:
                for line in f:
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) * 1000
            raise BenchError(f"{self.path}/cpu.stat has no usage_usec")
        if self.kind == "cgroup1":
            with open(os.path.join(self.path, "cpuacct.usage")) as f:
                return int(f.read())
        return sum(task_cpu_ns(p) for p in self.pids())

    def pss_kib(self):
        """Proportional set size summed over the group's processes, KiB:
        shared pages (nginx's session zone, Apache's shmcb) counted once."""
        return sum(pss_kib(p) for p in self.pids())

    def close(self):
        if self.path is not None:
            for _ in range(50):
                try:
                    os.rmdir(self.path)
                    return
                except OSError:
                    time.sleep(0.1)


def _descendants(root):
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def task_cpu_ns(pid):
    """On-CPU time of all live threads of pid (schedstat), ns."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
    except OSError:
        pass
    return total


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Daemon:
    """A server process in its own Group, pinned to a CPU, stopped on close."""

    def __init__(self, name, argv, cpu, port, log_path, env=None, stop_signal=signal.SIGTERM):
        self.name = name
        self.group = Group(name)
        self.log_path = log_path
        self.stop_signal = stop_signal
        self.stdio = open(log_path, "ab")
        full = ["taskset", "-c", str(cpu)] + [str(a) for a in argv]
        self.argv = full
        self.proc = subprocess.Popen(
            full,
            stdout=self.stdio,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=self.group.enter,
            start_new_session=True,
        )
        self.group.root_pid = self.proc.pid
        try:
            wait_port(port, self.proc, name)
        except BenchError as e:
            self.close()
            with open(log_path, errors="replace") as f:
                tail = f.read().strip().splitlines()[-8:]
            raise BenchError(f"{e}; its output ({log_path}):\n  " + "\n  ".join(tail)) from None

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, self.stop_signal)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Children (Apache's) may outlive the parent by a moment.
        for _ in range(50):
            if not [p for p in self.group.pids() if os.path.exists(f"/proc/{p}")]:
                break
            time.sleep(0.1)
        self.group.close()
        self.stdio.close()


def established(port):
    """TCP connections in ESTABLISHED state whose local port is `port` (the
    server's side of each connection), from /proc/net/tcp{,6}."""
    n = 0
    want = f"{port:04X}"
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[3] == "01" and parts[1].rsplit(":", 1)[1] == want:
                        n += 1
        except OSError:
            pass
    return n
