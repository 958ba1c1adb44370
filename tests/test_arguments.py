"""Arguments by parameter name (`stead.arguments`): bound to the function's
signature at call time, positional and keyword alike, and read back as rows;
a record from before names were kept still reads."""

from __future__ import annotations

import inspect
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import stead
from stead import arguments


def refund(op: Any, order_id: str, amount: int, *, currency: str = "EUR") -> None: ...


def many(op: Any, first: str, *rest: int, **extra: Any) -> None: ...


def test_positional_values_are_named_by_the_signature() -> None:
    assert arguments.names(refund, ["o-7731", 4217], {}) == ["order_id", "amount"]
    assert arguments.names(refund, ["o-7731"], {"amount": 1, "currency": "USD"}) == [
        "order_id"]
    assert arguments.names(many, ["a", 1, 2], {"x": 3}) == ["first", "rest[0]", "rest[1]"]


def test_a_call_that_does_not_bind_is_not_named() -> None:
    assert arguments.names(refund, ["o", 1, 2], {}) is None
    assert arguments.names(refund, [], {"nope": 1}) is None


def test_rows_keep_call_order_keywords_last() -> None:
    stored = {"args": ["o-7731", 4217], "kwargs": {"currency": "USD"},
              "names": ["order_id", "amount"]}
    assert arguments.table(stored) == [("order_id", "o-7731"), ("amount", 4217),
                                       ("currency", "USD")]


def test_an_old_record_without_names_reads_by_position_or_by_a_signature() -> None:
    old = {"args": ["o-7731", 4217], "kwargs": {}}
    assert arguments.table(old) == [("#0", "o-7731"), ("#1", 4217)]
    assert arguments.table(old, refund) == [("order_id", "o-7731"), ("amount", 4217)]


def test_names_that_do_not_fit_the_values_are_not_believed() -> None:
    odd = {"args": ["a", "b"], "kwargs": {}, "names": ["only_one"]}
    assert arguments.table(odd) == [("#0", "a"), ("#1", "b")]


def test_what_is_not_arguments_has_no_rows() -> None:
    assert arguments.table(None) is None
    assert arguments.table({"args": "x"}) is None
    assert arguments.table([1, 2]) is None


async def test_a_run_records_its_inputs_names_when_it_starts(store: stead.Store) -> None:
    app = stead.App("named")

    @app.workflow()
    async def ship(run: stead.Run, order_id: str, address: dict[str, str],
                   express: bool = False) -> None: ...

    client = stead.Client(store, app)
    info = await client.start(ship, "o-1", {"city": "Lyon"}, express=True)
    stored = (await client.get(info.run_id)).input
    assert stored["names"] == ["order_id", "address"]
    assert arguments.table(stored) == [("order_id", "o-1"), ("address", {"city": "Lyon"}),
                                       ("express", True)]
    # a run started before names were kept reads by the workflow's signature
    old = {"args": stored["args"], "kwargs": stored["kwargs"]}
    assert arguments.table(old, ship.fn) == arguments.table(stored)


def test_names_are_read_from_each_functions_own_signature_when_kept() -> None:
    """Signatures of plain functions are kept by code and defaults (a step's
    function is named at every call): a wrapper shows what it wraps, two
    closures of one code share, and what is not a plain function is read
    afresh each time."""
    import functools

    def first(a: int, b: int = 1) -> None: ...

    def second(x: int, *rest: int) -> None: ...

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)
        return wrapper

    assert arguments.names(wrap(first), [1, 2], {}, skip=0) == ["a", "b"]
    assert arguments.names(wrap(second), [1, 2, 3], {}, skip=0) == ["x", "rest[0]", "rest[1]"]
    closures = [(lambda v: lambda q, r=v: None)(i) for i in range(3)]
    assert all(arguments.names(c, [1], {}, skip=0) == ["q"] for c in closures)
    assert arguments.names(closures[0], [1, 2, 3], {}, skip=0) is None  # does not bind

    def listed(a: int, b: list[int] = []) -> None: ...  # noqa: B006 (unhashable default)

    assert arguments.names(listed, [1, [2]], {}, skip=0) == ["a", "b"]

    class Tool:
        def run(self, query: str) -> None: ...

        def __call__(self, text: str) -> None: ...

    assert arguments.names(Tool().run, ["q"], {}, skip=0) == ["query"]
    assert arguments.names(Tool(), ["t"], {}, skip=0) == ["text"]


def _bound_names(fn: Any, args: tuple[Any, ...], skip: int) -> list[str] | None:
    """What `names` answers, found by binding the call as Python would."""
    signature = inspect.signature(fn)
    try:
        signature.bind(*([None] * skip), *args)
    except TypeError:
        return None
    return [p.name for p in list(signature.parameters.values())[skip:]][:len(args)]


@given(defaults=st.integers(0, 4), extra=st.integers(0, 4), given_n=st.integers(0, 8),
       skip=st.integers(0, 2))
def test_a_positional_call_is_named_as_binding_it_would(
        defaults: int, extra: int, given_n: int, skip: int) -> None:
    """The names of a call of positional values to a function of positional
    parameters, read without binding it, are those binding gives, and a call
    that does not bind (too few, too many) gets none."""
    required = [f"r{i}" for i in range(skip + extra)]
    optional = [f"o{i}=None" for i in range(defaults)]
    namespace: dict[str, Any] = {}
    exec(f"def fn({', '.join(required + optional)}): pass", namespace)
    fn = namespace["fn"]
    args = tuple(range(given_n))
    assert arguments.names(fn, args, {}, skip=skip) == _bound_names(fn, args, skip)
