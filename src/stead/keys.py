"""The keys that sign wait tokens, kept outside the database they protect.

A token is an HMAC of its run and wait under one key, and names that key's id
(`stk1.<key id>.<mac>`); the database keeps only the token's hash. Anyone who
can read the database can therefore not mint a token: that takes a key.

Where the keys come from, first found wins:

1. the hook given to `open_store(url, keys=...)`: a `Keyring`, or a function
   returning one (a secrets manager);
2. `STEAD_SECRET`: one key (the same value on every machine);
3. `STEAD_KEY_FILE`: a key file, which must exist (`stead keys add` makes it);
4. SQLite: the key file beside the database (`stead.db` -> `stead.db.keys`),
   created with mode 0600 on first use;
5. otherwise `~/.config/stead/keys` if it exists. PostgreSQL serves many
   machines, so no key is ever made up there: a key made on one machine would
   be refused on the others. With none of these, opening a wait fails and
   says what to set.

Rotation: `stead keys add` appends a key; new tokens are signed with the newest
one, and tokens of every key that is not revoked still verify. `stead keys
revoke ID` removes a key for good: its tokens are refused from then on.

Data keys (`data_keys` in the key file) wrap the keys payloads are sealed
with when encryption is on (see `stead.payloads`): `stead keys rotate` adds
one, which wraps new data keys from then on; `stead keys reencrypt` rewraps
the old ones under it. `STEAD_SECRET` gives one data key, derived from it.

Tokens signed before keys left the database (`stk_<mac>`) belong to the key id
`legacy`: their secret is the database's old one (or `STEAD_SECRET`, when it
was set), kept only so such a run replays; they verify until `legacy` is
revoked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from stead import errors

SECRET_ENV = "STEAD_SECRET"
KEY_FILE_ENV = "STEAD_KEY_FILE"
LEGACY = "legacy"
HOME_KEY_FILE = Path("~/.config/stead/keys")


@dataclasses.dataclass(frozen=True)
class Key:
    """One signing key: its id (in every token it signs) and its secret."""

    id: str
    secret: bytes = dataclasses.field(repr=False)
    added_at: str = dataclasses.field(default="", compare=False)


def key_id(secret: bytes) -> str:
    """A key's id: derived from its secret, so every machine holding the same
    secret names it alike. Short, and says nothing usable about the secret."""
    return hashlib.sha256(b"stead key id\x00" + secret).hexdigest()[:12]


def new_key() -> Key:
    secret = secrets.token_bytes(32)
    return Key(key_id(secret), secret,
               dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


@dataclasses.dataclass(frozen=True)
class Keyring:
    """The keys in force: the newest signs new tokens, every one verifies;
    `revoked` ids are refused. `legacy` is the secret of tokens signed before
    keys had ids (None: there are none)."""

    keys: tuple[Key, ...]
    revoked: frozenset[str] = frozenset()
    legacy: bytes | None = dataclasses.field(default=None, repr=False)
    # The keys that wrap payloads' data keys, oldest first (see `stead.payloads`).
    data_keys: tuple[Key, ...] = ()

    @classmethod
    def from_secret(cls, secret: str | bytes) -> Keyring:
        """A keyring of one key, from a secret string (e.g. from a vault)."""
        raw = secret.encode() if isinstance(secret, str) else secret
        if not raw:
            raise errors.KeysUnavailable("an empty secret cannot sign wait tokens")
        data = hashlib.sha256(b"stead data key\x00" + raw).digest()
        return cls((Key(key_id(raw), raw),), data_keys=(Key(key_id(data), data),))

    @property
    def current_data(self) -> Key:
        """The key that wraps new payload data keys."""
        if not self.data_keys:
            raise errors.KeysUnavailable(
                "no data key to encrypt payloads with: make one with `stead keys rotate` (it "
                "goes to the key file; copy the file to every machine)")
        return self.data_keys[-1]

    def data_key(self, kid: str) -> Key | None:
        return next((k for k in self.data_keys if k.id == kid), None)

    @property
    def current(self) -> Key:
        """The key that signs new tokens."""
        live = [k for k in self.keys if k.id not in self.revoked]
        if not live:
            raise errors.KeysUnavailable(
                "every key that signs wait tokens is revoked; add one: stead keys add")
        return live[-1]

    def get(self, kid: str) -> Key | None:
        """The key with id `kid`, if it is held and not revoked."""
        if kid in self.revoked:
            return None
        if kid == LEGACY:
            return None if self.legacy is None else Key(LEGACY, self.legacy)
        return next((k for k in self.keys if k.id == kid), None)

    def accepts(self, kid: str) -> bool:
        """Whether tokens signed by `kid` verify (legacy ones verify by their
        stored hash alone, until revoked)."""
        if kid in self.revoked:
            return False
        return kid == LEGACY or any(k.id == kid for k in self.keys)

    def with_legacy(self, secret: bytes | None) -> Keyring:
        return dataclasses.replace(self, legacy=secret)


KeySource = Keyring | Callable[[], Keyring]


# -- the key file ------------------------------------------------------------------------
def read_file(path: str | os.PathLike[str]) -> Keyring:
    """The keyring in a key file (JSON: `keys` [{id, secret (hex), added_at}],
    `revoked` [ids])."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        found = tuple(Key(str(k["id"]), bytes.fromhex(k["secret"]), str(k.get("added_at", "")))
                      for k in data["keys"])
        revoked = frozenset(str(r) for r in data.get("revoked", []))
        wrapping = tuple(Key(str(k["id"]), bytes.fromhex(k["secret"]), str(k.get("added_at", "")))
                         for k in data.get("data_keys", []))
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise errors.KeysUnavailable(
            f"key file {path} cannot be read ({exc}); restore it from a copy, or make a "
            "new one with `stead keys add` (tokens of the old keys are then refused)"
        ) from exc
    for key in found + wrapping:
        if key.id != key_id(key.secret):
            raise errors.KeysUnavailable(
                f"key file {path}: key {key.id} does not match its secret; restore the "
                "file from a copy")
    return Keyring(found, revoked, data_keys=wrapping)


def _write(path: Path, ring: Keyring, *, exclusive: bool) -> None:
    """Write `ring` to `path` with mode 0600, all at once: readers see the old
    file or the new one. `exclusive`: only if no file is there yet."""
    data = {
        "keys": [{"id": k.id, "secret": k.secret.hex(), "added_at": k.added_at}
                 for k in ring.keys],
        "revoked": sorted(ring.revoked),
        "data_keys": [{"id": k.id, "secret": k.secret.hex(), "added_at": k.added_at}
                      for k in ring.data_keys],
    }
    import tempfile  # here: it brings shutil and its compressors, and only this writes

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # FileExistsError if another process made it first
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def ensure_file(path: str | os.PathLike[str]) -> Keyring:
    """The keyring in `path`, made (one new key, mode 0600) if there is none."""
    target = Path(path)
    try:
        return read_file(target)
    except FileNotFoundError:
        pass
    with contextlib.suppress(FileExistsError):
        _write(target, Keyring((new_key(),)), exclusive=True)
    return read_file(target)


def add_key(path: str | os.PathLike[str]) -> Key:
    """Append a new key to the file (made if missing): it signs new tokens."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        ring = read_file(target)
    except FileNotFoundError:
        ring = Keyring(())
    key = new_key()
    _write(target, dataclasses.replace(ring, keys=(*ring.keys, key)), exclusive=False)
    return key


def rotate(path: str | os.PathLike[str]) -> Key:
    """Append a new data key to the file (made if missing): it wraps new
    payload data keys; the older ones still unwrap theirs."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        ring = read_file(target)
    except FileNotFoundError:
        ring = Keyring((new_key(),))
    key = new_key()
    _write(target, dataclasses.replace(ring, data_keys=(*ring.data_keys, key)), exclusive=False)
    return key


def revoke(path: str | os.PathLike[str], kid: str) -> None:
    """Revoke key `kid` (or `legacy`) in the file: its secret is dropped and
    tokens it signed are refused from now on."""
    target = Path(path)
    ring = read_file(target)
    if kid != LEGACY and not any(k.id == kid for k in ring.keys) and kid not in ring.revoked:
        known = ", ".join([k.id for k in ring.keys] + [LEGACY]) or "none"
        raise errors.KeysUnavailable(f"key file {path} has no key {kid!r} (keys: {known})")
    kept = tuple(k for k in ring.keys if k.id != kid)
    _write(target, Keyring(kept, ring.revoked | {kid}, data_keys=ring.data_keys),
           exclusive=False)


# -- where the keys come from -------------------------------------------------------------
def key_file(beside: str | None) -> Path:
    """The key file `stead keys` manages: `STEAD_KEY_FILE`, else the one beside
    an SQLite database, else `~/.config/stead/keys`."""
    named = os.environ.get(KEY_FILE_ENV)
    if named:
        return Path(named)
    if beside is not None:
        return Path(beside)
    return HOME_KEY_FILE.expanduser()


def resolve(hook: KeySource | None, beside: str | None) -> Keyring:
    """The keyring in force (see the module's docstring). `beside` is the key
    file next to an SQLite database, made on first use; None for a database
    that serves many machines."""
    if hook is not None:
        ring = hook() if callable(hook) else hook
        if not isinstance(ring, Keyring):
            raise errors.KeysUnavailable(
                f"the keys hook returned {type(ring).__qualname__}, not a stead.Keyring")
        return ring
    env = os.environ.get(SECRET_ENV)
    if env:
        # Before keys had ids, STEAD_SECRET signed tokens as it is: those are legacy.
        return Keyring.from_secret(env).with_legacy(env.encode())
    named = os.environ.get(KEY_FILE_ENV)
    if named:
        return _existing(Path(named))
    if beside is not None:
        return ensure_file(beside)
    home = HOME_KEY_FILE.expanduser()
    if home.exists():
        return _existing(home)
    raise errors.KeysUnavailable(
        "no key to sign wait tokens: set STEAD_SECRET to the same secret on every "
        f"machine, or point {KEY_FILE_ENV} at a copy of one key file on every machine "
        f"(make it once with `stead keys add --file PATH`), or make {HOME_KEY_FILE}. "
        "stead never makes a key up for a shared database: other machines would "
        "refuse its tokens"
    )


def _existing(path: Path) -> Keyring:
    try:
        return read_file(path)
    except FileNotFoundError:
        raise errors.KeysUnavailable(
            f"key file {path} does not exist; make it with `stead keys add --file {path}` "
            "and copy it to every machine that runs workers or checks tokens"
        ) from None
