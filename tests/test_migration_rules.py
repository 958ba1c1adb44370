"""The rule a migration's journal obeys (`migrations.new_journal`), over many
journals and edits: a journal that keeps every effect record (renamed or
not, digest changed or not) is accepted and numbered from 0; one that drops
or alters any effect record's phase, attempt, address or payload is refused,
naming the effect. Records of other kinds may be kept, renamed or cut."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stead
from stead.migrations import Migration, MigrationView, new_journal
from stead.records import Record, RecordKind, RecordStatus
from tests import stress

EFFECT_PHASES = (RecordStatus.INTENT, RecordStatus.ACCEPTED, RecordStatus.OK)


@st.composite
def journals(draw: st.DrawFn) -> tuple[Record, ...]:
    """A sequential journal: steps and effects (each effect one to three phases)."""
    recs: list[Record] = []
    for addr in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            phases = EFFECT_PHASES[:draw(st.integers(1, 3))]
            for status in phases:
                payload = {"key": f"r:{addr}"} if status == RecordStatus.INTENT else {"n": addr}
                recs.append(Record(len(recs), str(addr), 1, RecordKind.EFFECT, f"e{addr}",
                                   "d", status, json.dumps(payload), 1, 0.0))
        else:
            recs.append(Record(len(recs), str(addr), 1, RecordKind.STEP, f"s{addr}", "d",
                               RecordStatus.OK, "1", 1, 0.0))
    return tuple(recs)


def _view(records: tuple[Record, ...]) -> MigrationView:
    return MigrationView("r", "wf", 1, 2, None, (), {}, records, None, 0, ())


MIGRATION = Migration("wf", 1, 2, lambda view: stead.Migrated())


@settings(max_examples=stress.examples(200), deadline=None)
@given(journals(), st.data())
def test_a_journal_is_accepted_exactly_when_it_keeps_every_effect_record(
    records: tuple[Record, ...], data: st.DataObject,
) -> None:
    view = _view(records)
    keep = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    rename = data.draw(st.booleans())
    edited = [r.evolve(name=r.name + "_v2", digest="other") if rename else r
              for r, kept in zip(records, keep, strict=True) if kept]
    dropped_effect = any(r.kind == RecordKind.EFFECT and not kept
                         for r, kept in zip(records, keep, strict=True))
    made = stead.Migrated(journal=edited)
    if dropped_effect:
        with pytest.raises(stead.MigrationRefused, match="would lose"):
            new_journal(MIGRATION, view, made)
    else:
        numbered = new_journal(MIGRATION, view, made)
        assert [r.seq for r in numbered] == list(range(len(edited)))
        assert [(r.addr, r.kind, r.status, r.payload) for r in numbered] == [
            (r.addr, r.kind, r.status, r.payload) for r in edited]


@settings(max_examples=stress.examples(100), deadline=None)
@given(journals(), st.data())
def test_an_effect_record_altered_in_place_is_refused(
    records: tuple[Record, ...], data: st.DataObject,
) -> None:
    effects = [i for i, r in enumerate(records) if r.kind == RecordKind.EFFECT]
    if not effects:
        return
    i = data.draw(st.sampled_from(effects))
    change = data.draw(st.sampled_from([
        {"payload": '{"forged": true}'}, {"attempt": 2}, {"addr": "99"},
        {"status": RecordStatus.UNKNOWN}]))
    edited = [r.evolve(**change) if j == i else r for j, r in enumerate(records)]
    with pytest.raises(stead.MigrationRefused, match=f"effect 'e{records[i].addr}'"):
        new_journal(MIGRATION, _view(records), stead.Migrated(journal=edited))


def test_a_journal_of_something_else_is_refused() -> None:
    with pytest.raises(stead.MigrationRefused, match="other than stead records"):
        new_journal(MIGRATION, _view(()), stead.Migrated(journal=[{"seq": 0}]))  # type: ignore[list-item]
