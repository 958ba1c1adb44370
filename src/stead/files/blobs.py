"""Workspace blobs kept outside the database: a directory or an object store,
through fsspec (`file:///srv/stead-blobs`, `s3://bucket/prefix`, ...; its
credentials come from fsspec's own configuration, never from stead).

A blob is named by its sha256, so writing one twice is writing it once, and a
blob written by a save that then failed (a stale worker) is harmless: nothing
names it. Each is written under a temporary name and moved into place, so a
reader never sees half a blob.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from typing import Any

from stead import errors


def filesystem(url: str, error: type[errors.SteadError], install: str) -> tuple[Any, str]:
    """fsspec's filesystem for `url` and the path in it; `error` when fsspec
    or the protocol's package is missing (`install`: the command that
    installs what is needed)."""
    try:
        import fsspec  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise error(
            f"blobs at {url[:200]!r} need fsspec: {install} in stead's checkout "
            "(docs/install.md)") from exc
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:  # an unknown protocol, or its package missing
        raise error(
            f"blobs at {url[:200]!r} cannot be reached: {exc}. Install what the URL's "
            "protocol needs (s3:// needs s3fs: pip install -e '.[s3]'), or name a blob URL "
            "fsspec knows") from exc
    return fs, str(path).rstrip("/")


def _fs(url: str) -> tuple[Any, str]:
    return filesystem(url, errors.WorkspaceError, "pip install -e '.[workspaces]'")


class BlobDir:
    """The blobs under one fsspec URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._fs, self._root = _fs(url)

    def _path(self, sha256: str) -> str:
        return f"{self._root}/{sha256[:2]}/{sha256}"

    def missing(self, hashes: Iterable[str]) -> list[str]:
        return [h for h in hashes if not self._fs.exists(self._path(h))]

    def put(self, sha256: str, data: bytes) -> None:
        path = self._path(sha256)
        self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        partial = f"{path}.{uuid.uuid4().hex[:8]}.partial"
        self._fs.pipe_file(partial, data)
        self._fs.mv(partial, path)

    def get(self, sha256: str) -> bytes:
        try:
            data = bytes(self._fs.cat_file(self._path(sha256)))
        except FileNotFoundError as exc:
            raise errors.WorkspaceMismatch(
                f"blob {sha256} is missing from {self.url}", [f"blob {sha256}: missing"]
            ) from exc
        if hashlib.sha256(data).hexdigest() != sha256:
            raise errors.WorkspaceMismatch(
                f"blob {sha256} in {self.url} does not hash to its name",
                [f"blob {sha256}: content differs"])
        return data
