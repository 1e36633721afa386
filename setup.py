"""The compiled accelerator, built at install time (the rest of the project's metadata is in
pyproject.toml).

Cython compiles the modules ``qwen_encode/_accelerator.py`` names, in pure-Python mode: the same
``.py`` files, typed by the ``.pxd`` files beside them, so there is one source and the pure path
is the same code. The build is optional: with ``QWEN_ENCODE_PURE=1``, without Cython, or if a
module fails to compile (no C compiler), the package installs and runs as pure Python. The build
writes ``_compiled.txt`` beside the compiled modules (each one and the hash of its source), which
``_accelerator`` checks so that a module edited since is run from its ``.py``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "qwen_encode"
# Cython's directives: the language of the sources, and annotations read as documentation only
# (typed as C by annotation, a ``list[int]`` argument would refuse a tuple that Python accepts).
DIRECTIVES = {"language_level": 3, "annotation_typing": False}


def _accelerator() -> ModuleType:
    """``qwen_encode/_accelerator.py`` loaded on its own (standard library only; the package,
    which needs its dependencies, is not imported): the modules to compile, the manifest's name
    and the hash it records, the switch."""
    spec = importlib.util.spec_from_file_location(
        "_qwen_encode_accelerator", PACKAGE / "_accelerator.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ACCELERATOR = _accelerator()


def _extensions() -> list[Any]:
    if ACCELERATOR.pure_requested():
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("qwen-encode: Cython is not installed; installing pure Python", file=sys.stderr)
        return []
    sources = [f"qwen_encode/{name}.py" for name in ACCELERATOR.MODULES]
    # The C files go to build/, not beside the sources.
    return cythonize(sources, build_dir="build/cython", compiler_directives=DIRECTIVES, quiet=True)


class OptionalBuildExt(build_ext):
    """``build_ext`` that installs pure Python for any module that does not compile, and
    writes the manifest of those that did."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # a module per core: the install waits for the slowest compile
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        self.built: list[str] = []
        try:
            super().run()
        except Exception as error:  # no compiler at all: the whole accelerator is optional
            print(f"qwen-encode: not compiled ({error}); installing pure Python", file=sys.stderr)
        self._write_manifest()

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            print(f"qwen-encode: {ext.name} not compiled ({error})", file=sys.stderr)
            return
        self.built.append(ext.name.rpartition(".")[2])

    def _write_manifest(self) -> None:
        if not self.extensions:
            return
        # Beside the compiled modules: the source tree (editable) or the wheel's build folder.
        target = Path(self.get_ext_fullpath(self.extensions[0].name)).parent / ACCELERATOR.MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        hashed = ACCELERATOR.source_hash
        lines = [f"{name} {hashed(PACKAGE / f'{name}.py')}\n" for name in self.built]
        target.write_text("".join(lines), encoding="utf-8")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
