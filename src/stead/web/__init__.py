"""stead's operator dashboard and event webhook (`stead ui`, `pip install -e
'.[web]'`): `create_app(...)` is an ASGI app; `sign_webhook` makes the
`Stead-Signature` header a webhook sender puts on its request; an auth hook
may name an `Identity` with its roles, and `sso_proxy` is one that reads an
SSO proxy's headers."""

from stead.web.proxy import sso_proxy
from stead.web.security import AuthHook, Identity
from stead.web.server import create_app
from stead.web.signatures import sign as sign_webhook

__all__ = ["AuthHook", "Identity", "create_app", "sign_webhook", "sso_proxy"]
