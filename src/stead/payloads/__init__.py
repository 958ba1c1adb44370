"""Payloads at rest: the one place where every value stead stores is sealed
on its way into the database and opened on its way out.

What is a payload: the JSON text `stead.codec` makes of what a run carries
(its input and result, journal values and completions, event payloads, task
state, intents, stream entries, wait requests, the inputs a migration kept).
What is not: ids, names, kinds, statuses, times, digests, which stay in clear
so the audit skeleton (which runs, steps, effects, decisions, who and when)
can always be read.

The seam's interface (what other features hook into):

- `Where(scope, what)`: where a value lives. `scope` is the run id (task
  state: `task:<task key>`); `what` a `What` (the column's kind). A sealed
  value is bound to its `Where` (AES-GCM's associated data): moved to
  another run or column, it does not open.
- `Sealer.seal(text, where, key) -> str` and `Sealer.unseal(text, where,
  key) -> str`: JSON text in, text out that fits the same TEXT column. A
  sealed value is the JSON object `{"$sealed": "aesgcm1", "s": scope, "w":
  what, "d": base64(nonce + ciphertext)}` (`envelope`). `key` is the
  scope's data key (`DataKey`), which `Sealer` holds in a bounded cache.
- `PayloadCodec`: what wraps and unwraps the per-scope data keys (envelope
  encryption). `KeyringCodec` wraps them with AES-256-GCM under the data
  keys of stead's keyring (`stead.keys`); a user may give their own (a KMS)
  as `open_store(url, payloads=...)`.
- In the store, `stead.store._sealing` applies the `Sealer` to every flow a
  backend runs (the query parameters and answers named in its tables) and to
  every fenced journal write. With no `Sealer` (encryption off, the
  default) nothing is wrapped: values go in and out as they are.

A feature that stores a new kind of payload adds a `What`, and its query's
parameter and column to `stead.store._sealing`'s tables; a feature that
replaces a value by a reference (a large value in a blob store) does so
before sealing, so the reference is sealed like any value.

Large values: a payload over the inline limit (`references.INLINE_BYTES`) is
written to the blob store (`blobs`: a directory or an fsspec URL) and
stored as a reference (`references.Reference`), with a `run_blobs` row
naming its run (`stead.store._large`; a task state's: `task:<task key>`,
`stead.store._large_state`). With sealing on, the blob's bytes are the value
sealed under its run's data key (a task state's: its task's), so a forgotten
run's blobs are unreadable too.

Erasure: a scope's data key is kept wrapped in the `payload_keys` table.
Forgetting a task destroys the wrapped keys of its runs: every payload
sealed under them becomes unreadable at once, and opening one answers
`FORGOTTEN`, a marker, instead of the value.
"""

from __future__ import annotations

from stead.payloads.codec import KeyringCodec, PayloadCodec, WrappedKey
from stead.payloads.envelope import FORGOTTEN, What, Where, is_forgotten, is_sealed
from stead.payloads.sealer import DataKey, Sealer

ENCRYPT_ENV = "STEAD_ENCRYPT"

__all__ = ["ENCRYPT_ENV", "FORGOTTEN", "DataKey", "KeyringCodec", "PayloadCodec", "Sealer",
           "What", "Where", "WrappedKey", "is_forgotten", "is_sealed"]
