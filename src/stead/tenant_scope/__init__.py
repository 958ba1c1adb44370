"""A tenant's view of a store: what `Client(tenant=...)` reads and writes
through, so that a service acting for one tenant (and the dashboard acting
for an operator of one tenant) cannot see or touch another's runs by mistake.

`scoped.Scoped` wraps a `Store`: every run it is asked about is checked
against the tenant before the store is asked (another tenant's run is not
there: `UnknownRun`); every list is asked of that tenant's runs alone; a run
it creates serves the tenant; and a store operation it has no rule for is
refused (`OutsideTenant`), so an operation added to the store later is
closed to scoped clients until it is given a rule here (`rules.RULES`)."""

from __future__ import annotations
