"""stead's operator dashboard and event webhook (`stead ui`, `pip install
'stead[web]'`): `create_app(...)` is an ASGI app; `sign_webhook` makes the
`Stead-Signature` header a webhook sender puts on its request."""

from stead.web.security import AuthHook
from stead.web.server import create_app
from stead.web.signatures import sign as sign_webhook

__all__ = ["AuthHook", "create_app", "sign_webhook"]
