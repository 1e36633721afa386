"""The compiled accelerator: which modules run compiled, and the switch back to pure Python.

At install time ``setup.py`` compiles the modules named in ``MODULES`` with Cython (pure-Python
mode: the same ``.py`` files, typed by the ``.pxd`` beside them) and writes ``MANIFEST`` beside
them: each compiled module and the SHA-256 of the source it was compiled from. Python imports a
compiled module in preference to its ``.py``. This module, imported before any of them, sends
a module back to its ``.py`` when:

- ``QWEN_ENCODE_PURE=1`` is set (the parity tests run the package both ways);
- its source has changed since it was compiled (an editable install after ``git pull`` or an
  edit: a stale compiled module would run the old code while the ``.py`` reads as the new).

Nothing here imports a compiled module, and it uses the standard library only: ``setup.py``
reads ``MODULES`` from this file before anything is built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import MemberDescriptorType
from typing import Any, Final

#: The modules compiled at install time: the renderer of plain rows and the encoder's
#: whole-prompt path, where a short row spends its time.
MODULES: Final = (
    "conversation",
    "encoder",
    "encoder_assembly",
    "encoder_owners",
    "encoder_whole",
    "encoding",
    "prompt",
    "protocol",
    "protocol_cache",
    "protocol_rows",
)
#: Written by the build beside the compiled modules: ``<module> <sha256 of its .py>`` a line.
MANIFEST: Final = "_compiled.txt"
#: Set to 1: run the pure-Python modules (at build time: compile nothing).
PURE_ENV: Final = "QWEN_ENCODE_PURE"

_HERE: Final = Path(__file__).resolve().parent
# How a module runs (accelerator_info's values).
COMPILED: Final = "compiled"
NOT_COMPILED: Final = "pure: not compiled"
FORCED: Final = f"pure: {PURE_ENV} is set"
STALE: Final = "pure: source changed since it was compiled"


def source_hash(path: Path) -> str:
    """The SHA-256 of a module's source, as the manifest records it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled_file(name: str) -> Path | None:
    for suffix in EXTENSION_SUFFIXES:
        found = _HERE / f"{name}{suffix}"
        if found.is_file():
            return found
    return None


def _manifest() -> dict[str, str]:
    try:
        lines = (_HERE / MANIFEST).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    return dict(line.split(" ", 1) for line in lines if " " in line)


def pure_requested() -> bool:
    """Whether ``QWEN_ENCODE_PURE`` asks for pure Python (at build time: compile nothing)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _survey() -> dict[str, str]:
    """Each module of ``MODULES``: how it runs (see ``accelerator_info``)."""
    pure = pure_requested()
    built = _manifest()
    found: dict[str, str] = {}
    for name in MODULES:
        source = _HERE / f"{name}.py"
        if _compiled_file(name) is None:
            found[name] = NOT_COMPILED
        elif not source.is_file():
            # Shipped compiled without its source (as a freezer may): nothing else can run.
            found[name] = COMPILED
        elif pure:
            found[name] = FORCED
        elif built.get(name) != source_hash(source):
            found[name] = STALE
        else:
            found[name] = COMPILED
    return found


class _PureFinder:
    """Finds the named modules' ``.py`` files ahead of the compiled modules beside them."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __package__ or name not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, _HERE / f"{name}.py")


_STATE: Final = _survey()
# The modules whose compiled file is there but must not run (no finder when there is none).
_pure = frozenset(name for name, how in _STATE.items() if how in (FORCED, STALE))
if _pure and __package__:  # loaded on its own (by setup.py), it chooses for no package
    already = [name for name in _pure if f"{__package__}.{name}" in sys.modules]
    if already:  # imported before the package (never, unless by hand): too late to choose
        raise ImportError(f"{__package__}: imported before its accelerator chose: {already}")
    sys.meta_path.insert(0, _PureFinder(_pure))


def runs_compiled(name: str) -> bool:
    """Whether module ``name`` of the package runs compiled in this process: a module with a
    loop that pays only compiled picks that form by this, and its builtins form otherwise."""
    return _STATE.get(name) == COMPILED


def slot_members(cls: type, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The member descriptors of ``cls``'s ``__slots__`` entries ``names``, in that order: what
    ``_capi.qe_set_slots`` sets a frozen value's fields through when compiled (it writes through
    each descriptor's member as is, so anything else is refused here, at import)."""
    members = tuple(cls.__dict__.get(name) for name in names)
    if not all(type(member) is MemberDescriptorType for member in members):
        raise ImportError(f"{cls.__name__}'s fields {names} must all be __slots__ members")
    return members


def accelerator_info() -> dict[str, str]:
    """How each module the accelerator covers runs in this process: ``"compiled"``, or
    ``"pure: "`` and why (not compiled; ``QWEN_ENCODE_PURE`` is set; its source changed since
    it was compiled, so the ``.py`` runs)."""
    return dict(_STATE)


def summary() -> str:
    """``accelerator_info`` counted, for a report's header: ``"10 compiled"``, or each way a
    module runs with how many do (the test run's header, the bench's)."""
    hows = list(_STATE.values())
    return ", ".join(f"{hows.count(how)} {how}" for how in dict.fromkeys(hows))
