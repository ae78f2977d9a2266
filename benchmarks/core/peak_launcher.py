"""Starts one command and writes its own peak RSS and CPU seconds: `python -I -S peak_launcher.py
USAGE_FILE CMD...` (run by `children.run_child` as a file, so no package is imported).

On Linux a child's peak RSS (wait4's ru_maxrss, and getrusage(RUSAGE_SELF) inside it) starts at
the high-water mark of the process it was forked from: exec records the forked image's peak. A
benchmark's parent may hold gigabytes (a bandwidth probe, a loaded dataset), so it starts this
small launcher, which starts the command and reaps it: the command's peak is floored at this
launcher's few MiB instead. USAGE_FILE gets "ru_maxrss_kib user_s system_s" of the command (with
its reaped descendants); the launcher exits as the command did (its signal re-raised).
"""

import os
import signal
import sys


def main() -> None:
    usage_file, cmd = sys.argv[1], sys.argv[2:]
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    except OSError as e:
        sys.stderr.write(f"{type(e).__name__}: {cmd[0]}: {e.strerror}\n")
        sys.exit(127)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # passed on; the command decides
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    with open(usage_file, "w") as f:
        f.write(f"{usage.ru_maxrss} {usage.ru_utime} {usage.ru_stime}\n")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
