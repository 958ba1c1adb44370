"""Side-by-side benchmarks of stead against DBOS and LangGraph (`python -m bench`).

Not part of the test suite. The modules named `w_*` are the workload scripts each
system runs in its own subprocess (stead in the project's venv, the peers in
`bench/.venv-peers`); they use only the standard library from this package.
"""
