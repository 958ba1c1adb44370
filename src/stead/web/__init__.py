"""stead's operator dashboard and event webhook (`stead ui`, `pip install
'stead[web]'`): `create_app(...)` is an ASGI app; `sign_webhook` makes the
`Stead-Signature` header a webhook sender puts on its body."""

from stead.web.hooks import sign as sign_webhook
from stead.web.security import AuthHook
from stead.web.server import create_app

__all__ = ["AuthHook", "create_app", "sign_webhook"]
