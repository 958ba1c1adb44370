"""Testing tools for stead users: crash injection for your own workflows.

    from stead.testing import CrashPoint, CrashingStore

See `stead.testing.crash` for how to kill a worker at a chosen journal write
and prove that the run resumes without repeating acknowledged calls.
"""

from stead.testing.crash import CrashingStore, CrashPoint, DelegatingStore, kill_process

__all__ = ["CrashPoint", "CrashingStore", "DelegatingStore", "kill_process"]
