"""Where a symbolic link of a workspace tree leads, worked out from the tree's
manifest alone, as the kernel would walk it: every link met on the way is
followed (its text, not a normalised form of it), so a chain such as
`a/up -> ..` then `out -> a/up/..` is seen to leave the tree.

A name the tree does not hold (or a file, where the walk goes on below it)
is taken as a directory that could be made there later, and the walk goes
on: a link is judged by where it could ever lead, not only by what exists
now. It knows no run, no store and no file system.
"""

from __future__ import annotations

from collections.abc import Mapping

from stead import errors

# The most links one resolution follows: the kernel's own limit (ELOOP).
MAX_HOPS = 40
# The most path components one resolution walks: a bound on the work a hostile
# manifest can ask for (the kernel bounds it with PATH_MAX and MAX_HOPS too).
MAX_STEPS = 4096


def parts(text: str) -> list[str]:
    """The components of a relative path text, without empty ones and `.`."""
    return [p for p in text.split("/") if p not in ("", ".")]


def resolve(targets: Mapping[str, str], path: str) -> str:
    """Where the link at `path` leads, as a path relative to the tree's top
    (`""` for the top itself). `targets` holds every link of the tree: its
    path and its text. Raises `WorkspaceEscape` if the walk leaves the tree
    (through `..` above the top, or an absolute target), and `WorkspaceUnsafe`
    for a chain that never ends (a loop, or more than `MAX_HOPS` links)."""
    here = parts(path)[:-1]
    pending = list(reversed(_target_parts(targets, path, path)))
    hops = steps = 0
    while pending:
        steps += 1
        if steps > MAX_STEPS:
            raise errors.WorkspaceUnsafe(
                f"link {path!r} resolves through more than {MAX_STEPS} path components")
        name = pending.pop()
        if name == "..":
            if not here:
                raise errors.WorkspaceEscape(
                    f"link {path!r} ({targets[path]!r}) leads out of the workspace")
            here.pop()
            continue
        step = "/".join([*here, name])
        if step not in targets:
            here.append(name)
            continue
        hops += 1
        if hops > MAX_HOPS:
            raise errors.WorkspaceUnsafe(
                f"link {path!r} does not resolve: a loop, or a chain of more than "
                f"{MAX_HOPS} links (at {step!r})")
        pending.extend(reversed(_target_parts(targets, step, path)))
    return "/".join(here)


def _target_parts(targets: Mapping[str, str], link: str, start: str) -> list[str]:
    text = targets[link]
    if text.startswith("/"):
        raise errors.WorkspaceEscape(
            f"link {start!r} leads to an absolute path ({text!r} at {link!r}), which a "
            "restore on another machine could not bring back")
    return parts(text)
