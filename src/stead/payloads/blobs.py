"""Large values kept outside the database, in a blob store: a directory or an
object store, through fsspec (`/srv/stead-blobs`, `file:///srv/stead-blobs`,
`s3://bucket/prefix`, ...; an object store's credentials come from fsspec's
own configuration, never from stead), the kind of place workspaces keep
their blobs (`stead.files.blobs`).

A blob is named by the sha256 of its bytes. `put` makes it durable before it
returns (a local file is fsynced, with its folder, after a rename from a
temporary name; an object store's upload has completed), so a reference
committed after it never names a missing blob. A crash before the reference
commits leaves an orphan that `stead blobs gc` finds. `put` always writes,
even a blob that is there: its time is then fresh, and the collector's grace
keeps it while the reference that will name it is committed.

Reading copies the bytes once into a buffer the size the reference states,
checks their sha256 and decodes them to text in one more copy; the buffer is
freed before the text is parsed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from stead import errors

# Characters encoded and written at a time: the bytes of only one chunk are
# held besides the text.
CHUNK = 1 << 20
_NAME = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True, slots=True)
class Stored:
    """A blob in the store: its name (sha256), size in bytes and last write
    time (seconds since the epoch)."""

    sha256: str
    size: int
    at: float


class BlobStore:
    """The blobs under one directory or fsspec URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        # A directory needs no fsspec: it is read and written with os alone.
        self.local = "://" not in url or url.startswith("file://")
        self._fs: Any = None
        if self.local:
            self._root = os.path.abspath(url.removeprefix("file://")).rstrip("/")
        else:
            from stead.files import blobs as files_blobs  # an object store's only

            self._fs, self._root = files_blobs.filesystem(
                url, errors.StoreError, "pip install -e '.[s3]'")

    def path(self, sha256: str) -> str:
        return f"{self._root}/{sha256[:2]}/{sha256}"

    # -- writing ----------------------------------------------------------------------
    def put_text(self, text: str) -> tuple[str, int]:
        """Store `text` as UTF-8 (JSON from `stead.codec` is ASCII: one byte a
        character); its sha256 and size once durable."""
        digest = hashlib.sha256()
        size = 0
        for start in range(0, len(text), CHUNK):
            piece = text[start:start + CHUNK].encode("utf-8", "surrogatepass")
            digest.update(piece)
            size += len(piece)
        sha256 = digest.hexdigest()
        chunks = (text[s:s + CHUNK].encode("utf-8", "surrogatepass")
                  for s in range(0, len(text), CHUNK))
        self._write(sha256, chunks)
        return sha256, size

    def _write(self, sha256: str, chunks: Iterator[bytes]) -> None:
        path = self.path(sha256)
        folder = path.rsplit("/", 1)[0]
        if self.local:
            os.makedirs(folder, exist_ok=True)
            partial = f"{path}.{uuid.uuid4().hex[:8]}.partial"
            try:
                with open(partial, "wb") as f:
                    for piece in chunks:
                        f.write(piece)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(partial, path)
            except BaseException:
                if os.path.exists(partial):
                    os.unlink(partial)
                raise
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)  # the rename itself is durable
            finally:
                os.close(fd)
            return
        # An object store makes an object visible only once its upload has
        # completed: the object is written under its own name, never half.
        with self._fs.open(path, "wb") as f:
            for piece in chunks:
                f.write(piece)

    # -- reading ----------------------------------------------------------------------
    def get_text(self, sha256: str, size: int) -> str:
        """The text of blob `sha256` of `size` bytes; `StoreError` when it is
        missing, of another size, or does not hash to its name."""
        buf = bytearray(size)
        view = memoryview(buf)
        try:
            with self._open(sha256) as f:
                got = 0
                while got < size:
                    n = f.readinto(view[got:]) if hasattr(f, "readinto") else None
                    if n is None:  # a file object without readinto
                        piece = f.read(min(CHUNK, size - got))
                        n = len(piece)
                        view[got:got + n] = piece
                    if not n:
                        break
                    got += n
                extra = f.read(1)
        except FileNotFoundError as exc:
            raise errors.StoreError(
                f"the large value {sha256} is missing from the blob store {self.url}: it "
                "was deleted outside stead, or the store is not the one it was written to "
                "(STEAD_BLOBS)") from exc
        finally:
            view.release()
        if got != size or extra:
            raise errors.StoreError(
                f"the large value {sha256} in {self.url} is not {size} bytes: it was changed "
                "outside stead")
        if hashlib.sha256(buf).hexdigest() != sha256:
            raise errors.StoreError(
                f"the large value {sha256} in {self.url} does not hash to its name: it was "
                "changed outside stead")
        text = buf.decode("utf-8", "surrogatepass")
        del buf
        return text

    def _open(self, sha256: str) -> Any:
        if self.local:
            return open(self.path(sha256), "rb")
        return self._fs.open(self.path(sha256), "rb")

    def exists(self, sha256: str) -> bool:
        if self.local:
            return os.path.exists(self.path(sha256))
        return bool(self._fs.exists(self.path(sha256)))

    # -- collecting -------------------------------------------------------------------
    def delete(self, sha256: str) -> None:
        """Remove blob `sha256` (nothing if it is gone)."""
        try:
            if self.local:
                os.unlink(self.path(sha256))
            else:
                self._fs.rm_file(self.path(sha256))
        except FileNotFoundError:
            pass

    def listing(self) -> Iterator[Stored]:
        """Every blob in the store (temporary files of a write in progress
        are not blobs)."""
        if self.local:
            for folder, _dirs, files in os.walk(self._root):
                for name in files:
                    if _NAME.fullmatch(name) is None:
                        continue
                    try:
                        st = os.stat(os.path.join(folder, name))
                    except FileNotFoundError:  # deleted meanwhile
                        continue
                    yield Stored(name, st.st_size, st.st_mtime)
            return
        self._fs.invalidate_cache()  # fsspec may cache listings: ask the store itself
        try:
            found = self._fs.find(self._root, detail=True)
        except FileNotFoundError:
            return
        for path, info in found.items():
            name = str(path).rsplit("/", 1)[-1]
            if _NAME.fullmatch(name) is None:
                continue
            yield Stored(name, int(info.get("size") or 0), _mtime(info))

    def write_time(self, sha256: str) -> float | None:
        """When blob `sha256` was last written; None if it is not there."""
        try:
            if self.local:
                return os.stat(self.path(sha256)).st_mtime
            self._fs.invalidate_cache(self.path(sha256))
            return _mtime(self._fs.info(self.path(sha256)))
        except FileNotFoundError:
            return None


def _mtime(info: dict[str, Any]) -> float:
    """When a blob was last written, as its store reports it; now when the
    store does not say (so the collector never takes it for old)."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return float(value)
        stamp = getattr(value, "timestamp", None)
        if callable(stamp):
            return float(stamp())
    return time.time()
