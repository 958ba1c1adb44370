"""Database URLs as they may be shown: on a screen, in a log line, in an error."""

from __future__ import annotations

from urllib.parse import urlsplit

MASK = "***"


def display_url(url: str) -> str:
    """`url` with its password replaced by `***`: the one in the user part
    (`postgresql://user:PASSWORD@host/db`) and any `password=` parameter."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a database URL that cannot be parsed>"
    shown = url  # changed in place, so what needs no mask reads exactly as given
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    if at and colon:
        shown = shown.replace(parts.netloc, f"{user}:{MASK}@{hostinfo}", 1)
    if parts.query:
        query = "&".join(
            f"password={MASK}" if pair.partition("=")[0].lower() == "password" else pair
            for pair in parts.query.split("&"))
        shown = shown.replace(f"?{parts.query}", f"?{query}", 1)
    return shown
