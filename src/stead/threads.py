"""The threads sync user functions run in, so they never block the event loop.

`asyncio.to_thread` goes through `concurrent.futures` (a work item, a
condition, a second future chained to the asyncio one): on a small VM that
machinery costs about as much as a step's commit. Here a call is one put on a
C-level queue and one wake-up of the loop back (shared by the answers that
arrive together), with the caller's contextvars, like `to_thread`.

A step's function (`inline`: a step with no timeout; effects, checks and
policies always take a thread) that has shown itself quick (its last few
calls in a thread each took under `QUICK` seconds) runs on the event loop's
own thread instead, when the loop has nothing else ready to run, seeing no
running loop as in a thread: each hand-off to a thread and
back is a wake-up of a sleeping thread, and on a machine whose cores are
busy each of those waits for the scheduler, which costs a trivial step more
than everything else it does. A call that runs inline and turns out slow
sends the function back to the threads for good, and after an inline call
the caller yields to the loop once, so signals and I/O are still served
between steps.

A call is slow when it took `QUICK` or more of the wall clock *and* either
blocked (the thread slept in the kernel: a voluntary context switch) or used
that much CPU. A call the scheduler merely preempted is not: on a loaded
machine a two-microsecond function now and then spans another process's
time slice, and judged by the wall clock alone it would send a quick
function to the threads for good, each of its steps then paying two
wake-ups that each wait for a core (`_slow`; where the kernel cannot say per
thread, the wall clock decides alone).

The threads are daemons: a sync step still running when the process exits is
cut off like a crash (its record was never written, so it runs again on
takeover), and the worker already waits for effects in flight before it lets
the process go.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# As many sync calls at once as the worker's default concurrency allows, with
# room for gathers; beyond that calls wait their turn in the queue.
MAX_THREADS = 32
# A call this short is cheaper run on the loop's thread than handed off.
QUICK = 0.0005
# Consecutive quick calls in a thread before a function runs inline.
QUICK_CALLS = 3
_NEVER = -1

# By function: consecutive quick calls seen, or _NEVER once one ran inline
# and was slow. Weak keys: a function is not kept alive; only the loop's
# thread reads and writes it.
_quick: weakref.WeakKeyDictionary[Callable[..., Any], int] = weakref.WeakKeyDictionary()

_Answer = tuple[asyncio.Future[Any], Any, BaseException | None]
# A thread's CPU time and voluntary context switches so far, or None where
# the kernel does not count them per thread (Linux does: RUSAGE_THREAD).
_Usage = tuple[float, int] | None

if sys.platform == "linux":
    import resource

    def _usage() -> _Usage:
        # The CPU time from the thread's clock, which the kernel brings up to
        # date when asked; rusage's times lag by up to a scheduler tick.
        return time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
else:
    def _usage() -> _Usage:
        return None


def _slow(started: float, before: _Usage) -> bool:
    """Whether a call begun at `started` (perf_counter), in this thread, with
    `before` its usage then, was slow: `QUICK` or more of the wall clock,
    spent blocked or computing, not waiting for a core."""
    if time.perf_counter() - started < QUICK:
        return False
    after = _usage()
    if before is None or after is None:
        return True
    return after[1] > before[1] or after[0] - before[0] >= QUICK


class _Mailbox:
    """Answers for one event loop. Waking a loop from another thread writes to
    its self-pipe (a syscall, ~40 µs on a small VM): answers that arrive while
    a wake-up is already on its way ride along with it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: the mailbox is the loop's value in `_mailboxes`, whose weak
        # key a strong reference back would keep alive forever.
        self._loop = weakref.ref(loop)
        self._lock = threading.Lock()
        self._answers: list[_Answer] = []

    def post(self, answer: _Answer) -> None:
        with self._lock:
            self._answers.append(answer)
            if len(self._answers) > 1:
                return  # the loop was woken for the first one and has not drained yet
        loop = self._loop()
        if loop is None:
            return  # the loop is gone: no one waits
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
            loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            answers, self._answers = self._answers, []
        for fut, value, exc in answers:
            _settle(fut, value, exc)


_mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = (
    weakref.WeakKeyDictionary())
_mailboxes_lock = threading.Lock()


def _mailbox(loop: asyncio.AbstractEventLoop) -> _Mailbox:
    try:
        return _mailboxes[loop]
    except KeyError:
        with _mailboxes_lock:
            return _mailboxes.setdefault(loop, _Mailbox(loop))


_Job = tuple[_Mailbox, asyncio.Future[Any], contextvars.Context, Callable[..., Any],
             Sequence[Any], Mapping[str, Any]]


class _Pool:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        # Waiting threads minus queued jobs: below zero, a job has no thread yet.
        self._free = 0

    def submit(self, job: _Job) -> None:
        with self._lock:
            self._free -= 1
            if self._free < 0 and self._threads < MAX_THREADS:
                self._threads += 1
                self._free += 1
                threading.Thread(target=self._serve, name=f"stead-call-{self._threads}",
                                 daemon=True).start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            mailbox, fut, context, fn, args, kwargs = self._jobs.get()
            value: Any = None
            try:
                before = _usage()
                started = time.perf_counter()
                value = context.run(fn, *args, **kwargs)
                slow = _slow(started, before)
            except BaseException as exc:  # handed to the awaiting task, whatever it is
                mailbox.post((fut, None, exc))
            else:
                mailbox.post((fut, (value, slow), None))
            del mailbox, fut, context, fn, args, kwargs, value  # hold nothing while idle
            with self._lock:
                self._free += 1


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():  # the awaiting task was cancelled
        return
    if exc is None:
        fut.set_result(value)
    elif isinstance(exc, StopIteration):  # a future refuses it, as a coroutine would
        error = RuntimeError(f"{type(exc).__name__} raised by a function in a thread")
        error.__cause__ = exc
        fut.set_exception(error)
    else:
        fut.set_exception(exc)


_pool = _Pool()


def _forget_threads() -> None:
    # A forked child has none of the parent's threads, and a lock one of them
    # held at the fork would stay held for ever.
    global _pool, _mailboxes, _mailboxes_lock, _quick
    _pool = _Pool()
    _quick = weakref.WeakKeyDictionary()
    _mailboxes = weakref.WeakKeyDictionary()
    _mailboxes_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_threads)


async def call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *,
               inline: bool = False) -> Any:
    """`fn(*args, **kwargs)` in a thread, with the caller's contextvars. With
    `inline`, a quick function runs on the loop's thread when nothing else is
    ready: only for calls with no timeout, since nothing can cut one short."""
    loop = asyncio.get_running_loop()
    seen = _seen(fn)
    if inline and seen >= QUICK_CALLS and _idle(loop):
        value = _inline(fn, args, kwargs)
        await asyncio.sleep(0)  # one turn of the loop: signals, I/O, timers
        return value
    fut: asyncio.Future[Any] = loop.create_future()
    _pool.submit((_mailbox(loop), fut, contextvars.copy_context(), fn, args, kwargs))
    try:
        value, slow = await fut
    except BaseException:
        _note(fn, seen, quick=False)
        raise
    _note(fn, seen, quick=not slow)
    return value


def _inline(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    before = _usage()
    started = time.perf_counter()
    # The function sees no running loop, as in a thread: `asyncio.run` and
    # libraries that refuse to run inside a loop behave the same either way.
    loop = asyncio.events.get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return contextvars.copy_context().run(fn, *args, **kwargs)
    except StopIteration as exc:  # as a future refuses it in a thread
        raise RuntimeError(f"{type(exc).__name__} raised by a function in a thread") from exc
    finally:
        asyncio.events._set_running_loop(loop)
        if _slow(started, before):
            _note(fn, QUICK_CALLS, quick=False, never=True)


def _seen(fn: Callable[..., Any]) -> int:
    try:
        return _quick.get(fn, 0)
    except TypeError:  # not weakly referenceable: always a thread
        return _NEVER


def _note(fn: Callable[..., Any], seen: int, *, quick: bool, never: bool = False) -> None:
    if seen == _NEVER:
        return
    with contextlib.suppress(TypeError):
        _quick[fn] = _NEVER if never else (seen + 1 if quick else 0)


def _idle(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no other callback is ready to run on `loop`. asyncio keeps them
    in `_ready` (no public way to ask); a loop without one is never idle. A
    cancelled handle there (a timeout that was called off, say) runs nothing.

    Other threads append to `_ready` (`call_soon_threadsafe`: a finished
    thread call, the database driver, a signal): the deque is copied in one
    C call, which no other thread can interrupt, and only the copy is looked
    through. Iterating the deque itself would raise "deque mutated during
    iteration" into the caller's step whenever such an append came between
    two handles."""
    ready = getattr(loop, "_ready", None)
    if ready is None or len(ready) > 8:  # a few to look through at most
        return False
    try:
        handles = tuple(ready)
    except RuntimeError:  # changed while being copied: something is arriving
        return False
    return all(handle.cancelled() for handle in handles)
