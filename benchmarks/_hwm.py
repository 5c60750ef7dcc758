"""Run a Python module or script as ``python -m``/``python`` would, and write the process's own
peak resident set (``VmHWM`` from ``/proc/self/status``, in kB) to a file when it exits.

Why not ``ru_maxrss`` of the child from the parent: on Linux it survives ``exec``, so a child
forked from a large parent (pytest, a benchmark driver) reports the parent's peak, not its own.
``VmHWM`` belongs to the address space the process runs in after ``exec``.

Usage: ``python benchmarks/_hwm.py OUT_FILE -m module args...`` or ``... OUT_FILE script.py args...``
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def _vmhwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def main() -> None:
    out = Path(sys.argv[1])
    rest = sys.argv[2:]
    atexit.register(lambda: out.write_text(f"{_vmhwm_kb()}\n"))
    if rest[:1] == ["-m"]:
        sys.argv = [rest[1], *rest[2:]]
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = rest
        sys.path.insert(0, str(Path(rest[0]).resolve().parent))
        runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()
