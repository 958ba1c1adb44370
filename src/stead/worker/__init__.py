"""The worker: hosts an app's workflows against a store. `loop` holds the
`Worker` and its claim loop; `claims` what it claims and how much at a time;
`attempts` one attempt of a run; `idle` when a worker working until idle or
done may stop; `leases` the thread that keeps its leases and watches its
loop; `options` its `WorkerOptions`."""

from stead.worker.loop import Worker
from stead.worker.options import WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
