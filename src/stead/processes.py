"""Whether a worker's process is alive, told from the same machine.

A worker records who it is (`this_process`): the machine, as the host name,
the boot and the process namespace (two containers sharing a host name never
judge each other's processes), its pid and the time the kernel started it. A
process on the same machine whose pid is gone, a zombie, or whose pid now
belongs to a process started at another time is dead (`dead`). Anything this
module cannot tell (another machine, no /proc, no permission to look) counts
as alive: the lease decides then, as it always did. A wrong "dead" would only
move a run early (the epoch still fences the old holder's writes); a wrong
"alive" costs the lease time.
"""

from __future__ import annotations

import dataclasses
import os
import socket

# How long a lease holder's presence lock must stay free, not taken again,
# before a claimer takes the holder for dead: longer than a live worker takes
# to notice its presence connection dropped and take the lock back (a look
# every quarter second, then a reconnect), short enough that a SIGKILLed
# worker on another machine is taken over within two seconds (claimers look
# every quarter second too).
PRESENCE_GRACE = 1.25


@dataclasses.dataclass(frozen=True)
class Process:
    """A worker's process: its machine, its pid and when the kernel started it."""

    machine: str
    pid: int
    started: str  # the kernel's start time of the pid ("" if it cannot tell)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return ""


def _machine() -> str:
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{namespace}"


def _stat(pid: int) -> tuple[str, str] | None:
    """The state letter and start time of `pid` from /proc, or None."""
    text = _read(f"/proc/{pid}/stat")
    # The name, in parentheses, may hold spaces: fields count after its end.
    fields = text[text.rfind(")") + 2:].split() if ")" in text else []
    return (fields[0], fields[19]) if len(fields) > 19 else None


def this_process() -> Process:
    pid = os.getpid()
    stat = _stat(pid)
    return Process(_machine(), pid, stat[1] if stat else "")


def dead(process: Process) -> bool:
    """Whether `process` has surely ended (see the module docstring)."""
    return running(process) is False


def running(process: Process) -> bool | None:
    """Whether `process` runs (True) or has ended (False), as this machine
    tells; None when it cannot (another machine, no /proc to tell its pid
    from a reused one)."""
    if process.machine != _machine() or process.pid <= 0:
        return None
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # no permission to signal it: it exists
        pass
    stat = _stat(process.pid)
    if stat is None:
        return None
    state, started = stat
    if state in ("Z", "X") or (bool(process.started) and started != process.started):
        return False
    return True if process.started else None
