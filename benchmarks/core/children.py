"""Child processes of the benchmarks: wall, CPU and peak memory of each, failures in one line.

`run_child` runs one command (each trainer in its own process, as a user runs it) and measures it;
`Runner` runs this package's own children (`python -m MODULE --_child KIND SPEC`) within a run's
time budget, each writing JSON lines that survive its failure, out-of-memory kill or timeout.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Mapping, Sequence

from benchmarks.core import paths
from benchmarks.core.paths import REPO
from webgraph_contract.command_line import one_line as _last_line_of

GIB = 2.0**30
# JAX_PLATFORMS per a benchmark's --device (auto: JAX's choice, no entry)
PLATFORMS = {"cpu": "cpu", "gpu": "cuda"}
LAUNCHER = str(pathlib.Path(__file__).with_name("peak_launcher.py"))


def error_line(error: BaseException) -> str:
    """An exception as one line with its type, as the benchmarks' reports carry it."""
    return f"{type(error).__name__}: {_last_line_of(error)}"[:300]


class ChildError(RuntimeError):
    """A child process failed: its command and the last line it wrote."""


@dataclasses.dataclass(frozen=True)
class Child:
    """What a finished child process gave: its output, exit status, wall and CPU seconds (its own
    and its reaped descendants'), peak resident memory in GiB (see `run_child`)."""

    stdout: str
    returncode: int
    wall_s: float
    cpu_s: float
    peak_gib: float


def run_child(
    cmd: Sequence[str],
    *,
    env: dict | None = None,
    log: str | os.PathLike | None = None,
    tree: bool = False,
    timeout: float | None = None,
    check: bool = True,
) -> Child:
    """Run `cmd` from the repository root; stdout captured, stderr into `log` (or kept for errors).

    The peak memory is the child's own peak RSS, or with `tree` the highest sum over the child and
    all its descendants, sampled from /proc every 0.2 s (workers running side by side). The own
    peak is wait4's ru_maxrss as reaped by `peak_launcher`, which starts the command: reaped by
    this process, it would start at this process's own high-water mark (Linux keeps the forked
    image's peak across exec), so a parent holding 1 GiB would give every child 1 GiB.
    `check`: a non-zero exit raises `ChildError` with the command and the last line of stderr.
    A `timeout` kills the child's process group and raises `ChildError`.
    """
    with tempfile.TemporaryDirectory(prefix="bench_child_") as tmp:
        err_path = pathlib.Path(log or pathlib.Path(tmp) / "stderr")
        usage_path = pathlib.Path(tmp) / "usage"
        name = name_of(cmd)
        if not tree:
            cmd = [sys.executable, "-I", "-S", LAUNCHER, usage_path, *cmd]
        with open(pathlib.Path(tmp) / "stdout", "w+") as out, open(err_path, "w") as err:
            start = time.monotonic()
            # a group: a timeout kills it all
            proc = subprocess.Popen(
                list(map(str, cmd)),
                stdout=out,
                stderr=err,
                cwd=REPO,
                env=env,
                start_new_session=True,
            )
            try:
                status, usage, peak = _wait(proc, name, start, timeout, tree)
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                raise
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - start
            out.seek(0)
            stdout = out.read()
        cpu = usage.ru_utime + usage.ru_stime
        # the command's own, from the launcher
        if not tree and usage_path.exists():
            maxrss_kib, user_s, system_s = usage_path.read_text().split()
            peak, cpu = int(maxrss_kib) * 1024, float(user_s) + float(system_s)
        if check and proc.returncode:
            where = f" (log {log})" if log else ""
            line = last_line(err_path)
            raise ChildError(f"{name}: exit {proc.returncode}: {line}{where}")
    return Child(stdout, proc.returncode, wall, cpu, peak / GIB)


def _wait(proc: subprocess.Popen, name: str, start: float, timeout: float | None, tree: bool):
    """(wait status, rusage, peak bytes) of a child; `ChildError` past the timeout."""
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            return status, usage, peak if tree else usage.ru_maxrss * 1024
        if timeout is not None and time.monotonic() - start > timeout:
            raise ChildError(f"{name}: timed out after {timeout:.0f} s")
        if tree:
            peak = max(peak, tree_rss_bytes(proc.pid))
        time.sleep(0.2 if tree else 0.02)


def name_of(cmd: Sequence[str]) -> str:
    """A command shortened for a message: the program and its module or script."""
    words = [str(w) for w in cmd]
    return " ".join(words[:3] if len(words) > 2 and words[1] == "-m" else words[:2])


def tail(path: str | os.PathLike, lines: int = 40) -> str:
    """The last `lines` lines of a child's output (a failure's traceback, kept in the report)."""
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(:|$)")


def last_line(path: str | os.PathLike) -> str:
    """A child's failure in one line: the last exception line of its output (JAX prints a note
    after the exception of a filtered traceback), else its last non-empty line."""
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    raised = [line for line in lines if EXCEPTION_LINE.match(line)]
    return (raised or lines or ["no output"])[-1][:300]


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            pid, ppid, pages = int(entry), int(fields[1]), int(fields[21])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
        rss[pid] = pages * page
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def json_lines(text: str) -> list[dict]:
    """The JSON object lines of a child's output; other lines, and a line cut short by a kill, are
    left out."""
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return lines


@dataclasses.dataclass
class Runner:
    """Runs `python -m MODULE --_child KIND SPEC` children within a run's budget; each gives its
    JSON lines (written to a file as they come) or one line of error."""

    module: str
    work: pathlib.Path
    env: dict[str, str]
    # time.monotonic() after which no child starts
    deadline: float
    section_timeout: float
    # name: its output's end
    failures: dict[str, str] = dataclasses.field(default_factory=dict)

    def __call__(
        self, kind: str, name: str, spec: dict, env: dict[str, str] | None = None
    ) -> tuple[list[dict], str | None, float]:
        left = min(self.section_timeout, self.deadline - time.monotonic())
        if left < 5:
            return [], "skipped: the run's --budget_s is spent", 0.0
        logs = self.work / "logs"
        out, log, spec_path = (
            logs / f"{name}{suffix}" for suffix in (".jsonl", ".log", ".spec.json")
        )
        logs.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        spec_path.write_text(
            json.dumps(dict(spec, out=str(out), work=str(self.work), timeout_s=left))
        )
        cmd = [sys.executable, "-m", self.module, "--_child", kind, str(spec_path)]
        error, t = None, time.monotonic()
        try:
            child = run_child(cmd, env=env or self.env, log=log, timeout=left, check=False)
            if child.returncode:
                error = f"exit {child.returncode}: {last_line(log)}"
        except ChildError:
            error = f"timed out after {left:.0f} s"
        if error:
            self.failures[name] = tail(log)
        lines = json_lines(out.read_text()) if out.exists() else []
        return lines, error, time.monotonic() - t


def write_line(out: str | os.PathLike, record: dict) -> None:
    """(In a child) append a JSON line to its output file; a `result` line carries the child's
    peak host RSS so far."""
    if "result" in record:
        record["result"]["peak_host_gib"] = own_peak_gib()
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")


def own_peak_gib() -> float:
    """This process's peak resident memory in GiB since its exec: VmHWM of /proc/self/status.
    (getrusage's ru_maxrss would start at the peak of the process it was forked from.) Where
    /proc is missing, ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    import resource

    # bytes on macOS, KiB on Linux
    scale = 2**30 if sys.platform == "darwin" else 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def nvidia_gpu() -> bool:
    """Whether this host shows an NVIDIA GPU (a /dev/nvidiaN) that JAX_PLATFORMS does not rule out:
    where implicit's CUDA wheels can run. Looks at no driver, so takes no GPU memory."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and not {"cuda", "gpu"} & set(platforms.lower().split(",")):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def wheel_plan(wheels: pathlib.Path, implicit: str, gpu: bool) -> tuple[list[str], str | None]:
    """The wheels in `wheels` to install for the children, or none and why (None: nothing to say).

    They are implicit's CUDA build and what it needs (`benchmarks/gpu_wheels.sh`, made for the GPU
    machine's Python): wanted only where implicit's GPU model is (`implicit` auto or gpu) on a
    host with an NVIDIA GPU, and only where every wheel fits this Python and platform (pip's own
    rule: one of its tags among this interpreter's)."""
    found = sorted(glob.glob(str(wheels / "*.whl")))
    if not found or implicit in ("cpu", "off"):
        return [], None
    if not gpu:
        why = "implicit's GPU model: not available here (no NVIDIA GPU); its wheels not installed"
        return [], why if implicit == "gpu" else None
    try:
        from packaging.tags import sys_tags
        from packaging.utils import parse_wheel_filename
    # no way to tell: pip decides
    except ImportError:
        return found, None
    supported = set(sys_tags())
    for path in found:
        try:
            tags = parse_wheel_filename(os.path.basename(path))[3]
        except ValueError:
            tags = frozenset()
        if not tags & supported:
            python = f"cp{sys.version_info.major}{sys.version_info.minor}"
            return [], (
                f"implicit's GPU model: not available ({os.path.basename(path)} in {wheels} does "
                f"not fit this Python, {python}: rebuild them with benchmarks/gpu_wheels.sh); "
                "implicit runs as installed"
            )
    return found, None


def wheel_env(wheels: pathlib.Path, site: pathlib.Path, found: Sequence[str]) -> dict[str, str]:
    """The environment of children that need wheels installed apart (implicit's CUDA build): the
    wheel files `found` (from `wheels`) installed into `site` (once) and put on PYTHONPATH, the
    `nvidia` packages' libraries on LD_LIBRARY_PATH (the GPU README's steps). pip's output is kept
    for the error: a failed install raises `subprocess.CalledProcessError` with it."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if not found:
        return env
    if not (site / "implicit").is_dir():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--target",
                str(site),
                *found,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    roots = [str(site), *[p for p in sys.path if p and os.path.isdir(p)]]
    libs = sorted(
        {
            os.path.dirname(p)
            for root in roots
            for p in glob.glob(os.path.join(root, "nvidia", "**", "lib*.so*"), recursive=True)
        }
    )
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [*libs, os.environ.get("LD_LIBRARY_PATH", "")])
    )
    return env


def add_wheel_args(p: argparse.ArgumentParser) -> None:
    """`--wheels` and `--site`: the wheels installed apart for the children (`wheel_env`)."""
    p.add_argument(
        "--wheels", default=str(paths.WHEELS), help="wheel files installed for the children"
    )
    p.add_argument(
        "--site", default=os.path.join(tempfile.gettempdir(), "site"), help="where they go"
    )


def children_env(args: argparse.Namespace, gpu: bool | None = None) -> dict[str, str]:
    """`wheel_env` of `args.wheels` and `args.site`, where `wheel_plan` wants them (`args.implicit`;
    `gpu`: whether an NVIDIA GPU is here, `nvidia_gpu()` unless given); why not, or why installing
    failed, in one line, and then this process's environment as it is."""
    wheels = pathlib.Path(args.wheels)
    found, why = wheel_plan(wheels, args.implicit, nvidia_gpu() if gpu is None else gpu)
    if why:
        print(why, flush=True)
    try:
        return wheel_env(wheels, pathlib.Path(args.site), found)
    except subprocess.CalledProcessError as e:
        said = [line.strip() for line in (e.stderr or e.stdout or "").splitlines() if line.strip()]
        said.insert(0, f"exit {e.returncode}")
        print(
            f"wheels: install into {args.site} failed ({said[-1]}); children run with the "
            "environment as it is",
            flush=True,
        )
        return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


ChildFn = Callable[[dict, str], None]


def main_or_child(main: Callable[[], int], children: Mapping[str, ChildFn]) -> None:
    """A benchmark's `__main__`: `--_child KIND SPEC` (a `Runner` child) runs `children[KIND]` on
    the spec at SPEC (its start time added); otherwise exits with `main()`'s status."""
    if len(sys.argv) == 4 and sys.argv[1] == "--_child":
        spec = dict(json.loads(pathlib.Path(sys.argv[3]).read_text()), started=time.monotonic())
        children[sys.argv[2]](spec, spec["out"])
    else:
        sys.exit(main())
