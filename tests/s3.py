"""An S3 for tests: moto's standalone server on loopback, reached through
s3fs as fsspec's `s3://` (the way a deployment reaches a real bucket)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's server, on a free loopback port, for the session."""
    server_mod = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_url(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket's URL; fsspec's `s3` configuration points at moto
    (as a deployment's would at its bucket: never through stead)."""
    import fsspec  # type: ignore[import-untyped,unused-ignore]
    import s3fs  # type: ignore[import-untyped,unused-ignore]

    options = {"endpoint_url": moto_endpoint, "key": "testing", "secret": "testing"}
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setitem(fsspec.config.conf, "s3", options)
    bucket = f"stead-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(bucket)
    s3fs.S3FileSystem.clear_instance_cache()
    yield f"s3://{bucket}/large"
    s3fs.S3FileSystem.clear_instance_cache()
