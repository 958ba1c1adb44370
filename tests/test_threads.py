"""The threads sync user functions run in (`stead.threads`): results, errors,
contextvars and cancellation as `asyncio.to_thread` gives them."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import sys
import threading
import time
import weakref

import pytest

from stead import threads

who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


async def test_a_call_returns_the_functions_result_from_another_thread() -> None:
    def where(a: int, *, b: int) -> tuple[int, str]:
        return a + b, threading.current_thread().name

    value, name = await threads.call(where, (1,), {"b": 2})
    assert value == 3
    assert name != threading.current_thread().name


async def test_an_exception_reaches_the_caller_as_raised() -> None:
    def boom() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await threads.call(boom, (), {})


async def test_stop_iteration_reaches_the_caller_as_a_runtime_error() -> None:
    # A future cannot carry StopIteration (it would end a coroutine): to_thread
    # fails on it; here it arrives wrapped, its cause kept.
    def stop() -> None:
        raise StopIteration

    with pytest.raises(RuntimeError) as info:
        await threads.call(stop, (), {})
    assert isinstance(info.value.__cause__, StopIteration)


async def test_the_callers_contextvars_are_seen_and_not_leaked_back() -> None:
    def read_and_set() -> str:
        seen = who.get()
        who.set("thread")
        return seen

    who.set("caller")
    assert await threads.call(read_and_set, (), {}) == "caller"
    assert who.get() == "caller"


async def test_calls_run_side_by_side() -> None:
    """Blocking calls awaited together run at once, each in a thread of its own."""
    n = 8
    barrier = threading.Barrier(n, timeout=10)
    names = await asyncio.gather(
        *(threads.call(lambda: (barrier.wait(), threading.current_thread().name)[1], (), {})
          for _ in range(n))
    )
    assert len(set(names)) == n


async def test_a_cancelled_caller_leaves_the_thread_to_finish_quietly() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> int:
        release.wait(10)
        finished.set()
        return 1

    errors: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    task = asyncio.create_task(threads.call(slow, (), {}))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(finished.wait, 10)
    await asyncio.sleep(0.05)  # the thread's answer reaches the loop: ignored
    assert errors == []
    assert await threads.call(lambda: 2, (), {}) == 2  # the thread serves again


def test_a_finished_event_loop_is_not_kept_alive() -> None:
    async def once() -> int:
        return int(await threads.call(lambda: 1, (), {}))

    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(once()) == 1
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # 3.12: fork with threads
def test_a_forked_child_gets_threads_of_its_own() -> None:
    """After a fork the parent's threads are not there: the child must start its
    own rather than queue calls for threads that do not exist."""
    assert asyncio.run(threads.call(lambda: 1, (), {})) == 1  # the parent has a thread
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if a call gets answered
        code = 1
        try:
            answer = asyncio.run(asyncio.wait_for(threads.call(lambda: 2, (), {}), 5))
            code = 0 if answer == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


async def test_a_quick_function_runs_on_the_loops_thread_once_proven() -> None:
    def where() -> str:
        return threading.current_thread().name

    names = [await threads.call(where, (), {}, inline=True) for _ in range(threads.QUICK_CALLS + 2)]
    here = threading.current_thread().name
    assert all(n != here for n in names[:threads.QUICK_CALLS])
    assert names[-1] == here


async def test_an_inline_call_keeps_the_callers_contextvars_to_itself() -> None:
    def change() -> str:
        who.set("step")
        return who.get()

    who.set("caller")
    for _ in range(threads.QUICK_CALLS + 2):
        assert await threads.call(change, (), {}, inline=True) == "step"
    assert who.get() == "caller"


async def test_a_quick_function_turned_slow_goes_back_to_a_thread_for_good() -> None:
    slow = False

    def step() -> str:
        if slow:
            time.sleep(threads.QUICK * 4)
        return threading.current_thread().name

    here = threading.current_thread().name
    for _ in range(threads.QUICK_CALLS + 1):
        await threads.call(step, (), {}, inline=True)
    slow = True
    assert await threads.call(step, (), {}, inline=True) == here  # it had been quick: inline
    slow = False
    again = [await threads.call(step, (), {}, inline=True) for _ in range(threads.QUICK_CALLS + 2)]
    assert all(name != here for name in again)


async def test_a_quick_function_goes_to_a_thread_while_other_tasks_are_ready() -> None:
    def where() -> str:
        return threading.current_thread().name

    for _ in range(threads.QUICK_CALLS + 1):
        await threads.call(where, (), {}, inline=True)

    async def busy() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    other = asyncio.create_task(busy())
    await asyncio.sleep(0)
    assert await threads.call(where, (), {}, inline=True) != threading.current_thread().name
    await other


async def test_a_quick_function_stays_in_threads_unless_inline_is_asked() -> None:
    def where() -> str:
        return threading.current_thread().name

    here = threading.current_thread().name
    names = [await threads.call(where, (), {}) for _ in range(threads.QUICK_CALLS + 3)]
    assert all(n != here for n in names)


async def test_an_inline_call_sees_no_running_loop_as_in_a_thread() -> None:
    def sees() -> tuple[str, bool]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return threading.current_thread().name, False
        return threading.current_thread().name, True

    seen = [await threads.call(sees, (), {}, inline=True) for _ in range(threads.QUICK_CALLS + 2)]
    here = threading.current_thread().name
    assert seen[-1][0] == here  # inline by now
    # As in a thread, no loop is running (so `asyncio.run` and libraries that
    # refuse to run inside a loop behave the same); the caller's loop runs on.
    assert not any(loop for _, loop in seen)
    assert asyncio.get_running_loop().is_running()


async def test_inline_calls_hold_while_other_threads_schedule_callbacks_on_the_loop() -> None:
    """Threads add callbacks to the loop (`call_soon_threadsafe`: a finished
    thread call, the database driver) at any moment, also while a call
    decides whether the loop is idle; the function must still just run."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def nothing() -> None:
        return None

    def hammer() -> None:
        while not stop.is_set():
            loop.call_soon_threadsafe(nothing)
            time.sleep(0.00005)

    def quick(i: int) -> int:
        return i

    for i in range(threads.QUICK_CALLS + 1):
        await threads.call(quick, (i,), {}, inline=True)
    pusher = threading.Thread(target=hammer, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    pusher.start()
    try:
        for i in range(5_000):
            # Called-off timers sit in the ready queue as cancelled handles:
            # the idle check looks through them, one by one.
            for _ in range(4):
                loop.call_soon(nothing).cancel()
            assert await threads.call(quick, (i,), {}, inline=True) == i
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        pusher.join()


async def test_a_quick_function_that_computes_past_quick_goes_back_to_a_thread() -> None:
    busy = False

    def step() -> str:
        if busy:  # CPU, no sleep: slow by its own work
            until = time.thread_time() + threads.QUICK * 4
            while time.thread_time() < until:
                pass
        return threading.current_thread().name

    here = threading.current_thread().name
    for _ in range(threads.QUICK_CALLS + 1):
        await threads.call(step, (), {}, inline=True)
    busy = True
    assert await threads.call(step, (), {}, inline=True) == here
    busy = False
    again = [await threads.call(step, (), {}, inline=True) for _ in range(threads.QUICK_CALLS + 2)]
    assert all(name != here for name in again)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or sys.platform != "linux",
                    reason="pins the process to one core; per-thread usage is Linux's")
async def test_a_quick_function_preempted_by_another_process_stays_on_the_loop() -> None:
    """On a loaded machine a quick call now and then spans another process's
    time slice: the wall clock says slow, but it neither blocked nor computed.
    Here a busy process shares this one's only core, so the scheduler
    preempts the loop thread many times while the calls run; each call must
    still run inline once proven quick."""
    import subprocess

    core = min(os.sched_getaffinity(0))
    was = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {core})
        os.sched_setaffinity(0, {core})

        def quick(i: int) -> int:
            return threading.get_ident()

        here = threading.get_ident()
        for i in range(threads.QUICK_CALLS + 1):
            await threads.call(quick, (i,), {}, inline=True)
        preempted_before = _involuntary()
        began = time.perf_counter()
        # At least 3,000 calls, and on until the scheduler has shared the core
        # many times while they ran (how often it does in a given time
        # depends on the machine's load).
        ran: list[int] = []
        while len(ran) < 3_000 or (_involuntary() - preempted_before < 5
                                   and time.perf_counter() - began < 20):
            ran += [await threads.call(quick, (i,), {}, inline=True) for i in range(500)]
        assert _involuntary() - preempted_before >= 5
    finally:
        os.sched_setaffinity(0, was)
        hog.kill()
        hog.wait()
    assert ran.count(here) == len(ran)


def _involuntary() -> int:
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as status:
        for line in status:
            if line.startswith("nonvoluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0
