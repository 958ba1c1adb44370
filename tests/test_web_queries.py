"""The runs list's and the run page's query strings, for any text a URL can
carry: each is read as a query or refused as `InvalidInput` (never another
error, which would be a 500), and a list's own links read back as the same
query."""

from __future__ import annotations

import string
import urllib.parse

from hypothesis import given
from hypothesis import strategies as st

from stead import errors
from stead.searches import Cursor
from stead.web import listing, window

KEYS = st.sampled_from([*listing.FIELDS, "limit", "after", "start", "other"])
VALUES = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["NaN", "inf", "-1", "0", "1", "500", "501", "1e3", "¹", "nan~a",
                     "1.5~r", "ship@1", "ship@", "@2", "2026-12-01T09:30", "completed"]),
    st.integers().map(str), st.floats().map(str), st.floats().map(lambda f: f"{f!r}~run"),
)


@given(st.dictionaries(KEYS, VALUES, max_size=6))
def test_any_query_is_read_or_refused_as_invalid_input(query: dict[str, str]) -> None:
    for parse, kind in ((listing.parse, listing.RunsQuery), (window.parse, window.Window)):
        try:
            read: object = parse(query)
        except errors.InvalidInput as exc:
            read = exc
        assert isinstance(read, kind | errors.InvalidInput)
        if isinstance(read, window.Window):
            assert 0 <= read.start <= window.LAST_SEQ and 1 <= read.limit <= window.MOST
        if isinstance(read, listing.RunsQuery):
            assert 1 <= read.limit <= listing.MOST


@given(st.dictionaries(st.sampled_from(["q", "task_id", "queue"]), st.text(max_size=40)),
       st.sampled_from(["", "completed", "waiting"]), st.integers(1, 500),
       st.floats(0, 1e10, allow_nan=False),
       st.text(string.ascii_letters + string.digits + "-_:~.", min_size=1, max_size=40))
def test_a_lists_link_reads_back_as_the_same_query(
    texts: dict[str, str], status: str, limit: int, at: float, run_id: str,
) -> None:
    try:
        q = listing.parse({**texts, "status": status, "limit": str(limit)})
    except errors.InvalidInput:
        return  # a value too long, refused: nothing to link
    link = q.link(Cursor(at, run_id))
    again = listing.parse(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query)))
    assert again.after == Cursor(at, run_id)
    assert (again.values, again.status, again.limit) == (q.values, q.status, q.limit)
