"""An app whose policy version comes from the environment (`POLICY_VERSION`),
so one module can run as the workers before and after a deploy: a refund
waits for an approval bound to the policy it opened under."""

from __future__ import annotations

import os
from typing import Any

import stead

VERSION_ENV = "POLICY_VERSION"


def allow(*_: Any) -> stead.Continue:
    return stead.Continue()


def make_app(version: str | None) -> stead.App:
    """The shop at policy `version` (None: without a policy)."""
    app = stead.App("policyshop") if version is None else stead.App(
        "policyshop", policy=allow, policy_version=version)

    @app.workflow()
    async def refund(run: stead.Run, order: str) -> Any:
        policy = app.current_policy
        # Bound to the version read from the deploy: a replay under the next
        # deploy reads another value, and still matches (it is not in the digest).
        w = await run.wait("approval", bind={
            "order_id": order, "policy_version": None if policy is None else policy.version})
        try:
            return {"approved": await w}
        except stead.WaitPolicyChanged as exc:
            return {"stale": [exc.bound, exc.now]}

    return app


app = make_app(os.environ.get(VERSION_ENV, "refunds@7"))
