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
# The most path components one resolution walks, and for a whole tree this
# many per link more: a bound on the work a hostile manifest can ask for (the
# kernel bounds one walk with PATH_MAX and MAX_HOPS too).
MAX_STEPS = 4096
STEPS_PER_LINK = 256


def parts(text: str) -> list[str]:
    """The components of a relative path text, without empty ones and `.`."""
    return [p for p in text.split("/") if p not in ("", ".")]


def check_all(targets: Mapping[str, str]) -> None:
    """Resolve every link of a tree, within one budget of steps for the
    tree: `WorkspaceUnsafe` past it."""
    left = MAX_STEPS + STEPS_PER_LINK * len(targets)
    for path in targets:
        left -= resolve(targets, path, min(left, MAX_STEPS))[1]


def resolve(targets: Mapping[str, str], path: str, most: int = MAX_STEPS) -> tuple[str, int]:
    """Where the link at `path` leads, as a path relative to the tree's top
    (`""` for the top itself), and the steps the walk took (at most `most`).
    `targets` holds every link of the tree: its path and its text. Raises
    `WorkspaceEscape` if the walk leaves the tree (through `..` above the
    top, or an absolute target), and `WorkspaceUnsafe` for a chain that never
    ends (a loop, or more than `MAX_HOPS` links) or past `most` steps."""
    here = parts(path)[:-1]
    pending = list(reversed(_target_parts(targets, path, path)))
    hops = steps = 0
    while pending:
        steps += 1
        if steps > most:
            raise errors.WorkspaceUnsafe(
                f"link {path!r} resolves through more path components than a tree's "
                f"links may ({most} left of the tree's budget)")
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
    return "/".join(here), steps


def _target_parts(targets: Mapping[str, str], link: str, start: str) -> list[str]:
    text = targets[link]
    if text.startswith("/"):
        raise errors.WorkspaceEscape(
            f"link {start!r} leads to an absolute path ({text!r} at {link!r}), which a "
            "restore on another machine could not bring back")
    return parts(text)
