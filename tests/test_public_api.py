"""The public surface is deliberate: exactly these names, in these groups.

`GROUPS` is the map a reader uses (the same groups as `stead.__doc__`; the
errors in the groups of `stead.errors.__doc__`). Every name is imported on
first use (PEP 562), from the module the table in `stead/__init__.py` names.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import stead
import stead.errors

GROUPS: dict[str, set[str]] = {
    "building an app": {"App", "Workflow", "Run", "Retry", "Queue", "Missed"},
    "driving runs": {"Client", "RunInfo", "Start", "Worker", "WorkerOptions", "prune",
                     "PruneReport"},
    "the store and time": {"Store", "open_store", "Keyring", "Clock", "SystemClock",
                           "FakeClock"},
    "the journal": {"Record", "ResumeRecord", "ResumeDetails", "UnknownOutcome", "Lineage",
                    "LineageKind", "Link"},
    "effects": {"Operation", "Outcome", "Compensation"},
    "waits": {"Wait", "Token", "Delivery", "Accepted", "Rejected", "Duplicate", "Operator"},
    "task state and streams": {"Facts", "Stream", "StreamEntry", "EntryKind"},
    "models": {"Model", "ScriptedModel", "Completion", "ToolCall", "Usage"},
    "intent and authority": {"Intent", "Grant", "Budget", "Action", "Continue", "Pause",
                             "Terminate", "Role"},
    "workspaces": {"Workspace", "WorkspacePath", "Snapshot", "SnapshotRow", "Fingerprint"},
    "deploys": {"Migrated", "MigrationView", "MigrationReport", "MigrationRow", "StoredRun",
                "HostRow"},
    "the version": {"__version__"},
    # The errors, by the groups of `stead.errors`.
    "errors": {"SteadError"},
    "errors: the store": {"StoreError", "StoreUnavailable", "StoreRejected", "DatabaseMissing",
                          "CorruptRecord", "KeysUnavailable"},
    "errors: input refused at the door": {"InvalidInput", "InvalidValue", "TaskMismatch",
                                          "InvalidStart", "UnknownWorkflow", "UnknownRun",
                                          "UnknownQueue", "InvalidSchedule",
                                          "InvalidTenant"},
    "errors: workflows and the journal": {"StaleLease", "SerializationError",
                                          "SecretInJournal", "NonDeterminism", "StepError",
                                          "StepTimeout", "ScriptExhausted", "StateConflict",
                                          "StreamClosed", "ChildFailed"},
    "errors: runs seen from outside": {"RunFailed", "DeadlineExceeded", "RunEnded",
                                       "NotStopped", "StatusNotReached", "ForkRefused"},
    "errors: waits": {"WaitNotOpen", "WaitExpired", "WaitRevoked", "WaitPolicyChanged",
                      "TokenHidden"},
    "errors: effects": {"EffectFailed", "EffectCompensated", "OutcomeUncertain"},
    "errors: intent and authority": {"InvalidIntent", "GrantWidening", "GrantRefused",
                                     "NotAllowed", "UnknownAction", "RunMovedOn",
                                     "OutsideTenant"},
    "errors: workspaces": {"WorkspaceError", "WorkspaceOutsideRoot", "WorkspaceEscape",
                           "WorkspaceUnsafe", "WorkspaceTooLarge", "WorkspaceChanged",
                           "WorkspaceMismatch"},
    "errors: deploys": {"MigrationRefused"},
}


def _exceptions(names: list[str], module: object) -> set[str]:
    return {n for n in names
            if inspect.isclass(obj := getattr(module, n)) and issubclass(obj, BaseException)}


def test_the_exported_names_are_exactly_the_groups() -> None:
    every = [name for names in GROUPS.values() for name in names]
    assert len(every) == len(set(every)), "a name sits in two groups"
    assert sorted(stead.__all__) == sorted(every)
    assert len(stead.__all__) == len(set(stead.__all__))


def test_the_docstring_names_every_name_in_its_group() -> None:
    doc = stead.__doc__ or ""
    for group, names in GROUPS.items():
        if group.startswith("errors") or group == "the version":
            continue
        line = re.search(rf"^- {group}: (.*?)(?=^- |\Z)", doc, re.M | re.S)
        assert line is not None, group
        assert set(re.findall(r"`(\w+)`", line.group(1))) == names, group


def test_every_error_is_in_stead_errors_and_the_errors_groups() -> None:
    top = _exceptions(stead.__all__, stead)
    assert top == {n for g, names in GROUPS.items() if g.startswith("errors") for n in names}
    assert top <= set(stead.errors.__all__)
    for name in top:
        assert getattr(stead, name) is getattr(stead.errors, name)
    # stead.errors holds every exception it defines, each in a group of its docstring.
    defined = {n for n, obj in vars(stead.errors).items() if inspect.isclass(obj)
               and issubclass(obj, BaseException) and obj.__module__ == "stead.errors"}
    assert set(stead.errors.__all__) == defined
    grouped = re.findall(r"`(\w+)`", (stead.errors.__doc__ or "").split("By where")[1])
    assert sorted(grouped) == sorted(defined - {"SteadError"})
    for group, names in GROUPS.items():
        if group.startswith("errors: "):
            line = re.search(rf"^- {group[len('errors: '):]}: (.*?)(?=^- |\Z)",
                             stead.errors.__doc__ or "", re.M | re.S)
            assert line is not None, group
            assert names <= set(re.findall(r"`(\w+)`", line.group(1))), group


def test_every_error_derives_from_stead_error() -> None:
    for name in stead.errors.__all__:
        assert issubclass(getattr(stead.errors, name), stead.SteadError), name


def test_every_name_resolves_lazily_from_the_module_it_names() -> None:
    # A fresh interpreter: `import stead` imports no module of stead's own but
    # itself; then each name comes from the module the table names.
    code = (
        "import sys, stead\n"
        "early = sorted(m for m in sys.modules if m.startswith('stead.'))\n"
        "assert not early, early\n"
        "assert set(dir(stead)) >= set(stead.__all__)\n"
        "from stead import Client, App\n"
        "assert stead.errors.StepError is stead.StepError\n"  # a submodule, by attribute
        "assert not hasattr(stead, 'no_such_name')\n"
        "for name in stead.__all__:\n"
        "    getattr(stead, name)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name, where in stead._WHERE.items():
        assert getattr(stead, name) is getattr(sys.modules[where], name), name


def test_the_type_checkers_imports_match_the_table() -> None:
    # `if TYPE_CHECKING:` imports let mypy and IDEs see each name; they say
    # what the table says.
    tree = ast.parse(Path(stead.__file__).read_text(encoding="utf-8"))
    [block] = [n for n in tree.body if isinstance(n, ast.If)
               and ast.unparse(n.test) == "TYPE_CHECKING"]
    seen = {alias.name: f"{node.module}" for node in block.body
            if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert seen == stead._WHERE


def test_no_public_name_leaks_an_underscore_module() -> None:
    for name in stead.__all__:
        if name == "__version__":
            continue
        obj = getattr(stead, name)
        module = getattr(obj, "__module__", None) or stead._WHERE[name]
        assert not any(part.startswith("_") for part in module.split(".")), (name, module)
        assert not any(part.startswith("_") for part in stead._WHERE[name].split(".")), name


def test_nothing_of_contrib_is_at_the_top() -> None:
    for name in stead.__all__:
        module = getattr(getattr(stead, name), "__module__", "") or ""
        assert not module.startswith("stead.contrib"), name
        assert not stead._WHERE.get(name, "").startswith("stead.contrib"), name
