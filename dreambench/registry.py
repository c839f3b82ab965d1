"""Name → object registries with decorator registration, duplicate-name errors and "did you mean" hints."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """An unknown registry name. `str()` carries the full message (KeyError would quote it)."""

    def __str__(self) -> str:  # KeyError.__str__ wraps the message in quotes
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str, loader: Callable[[], None] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._loader = loader  # imports the modules that register into this registry, once
        self._loaded = loader is None

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if not name or name != name.strip() or "/" in name:
            raise ValueError(f"invalid {self.kind} name {name!r}")
        if name in self._items and self._items[name] is not obj:
            raise ValueError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {obj!r})")
        self._items[name] = obj

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            assert self._loader is not None
            self._loader()

    def get(self, name: str) -> T:
        self._ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{hint} (known: {', '.join(sorted(self._items))})"
            ) from None

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._items

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        self._ensure_loaded()
        return iter(sorted(self._items.items()))


def discover_plugins(package: str, folders: str = "", entry_point_group: str | None = None) -> None:
    """Import what registers into a registry: every public module of ``package`` (imported by name, so the
    package that defines the registry depends on none of them), every ``*.py`` of the ``os.pathsep``-separated
    ``folders``, and every entry point of ``entry_point_group`` of the installed distributions."""
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
    for folder in folders.split(os.pathsep):
        if folder.strip():
            import_folder(Path(folder))
    if entry_point_group:
        for entry_point in importlib.metadata.entry_points(group=entry_point_group):
            entry_point.load()


def import_folder(folder: Path) -> None:
    """Import every ``*.py`` file of ``folder`` (not ``_*``) once, each as its own module; a file that fails to
    import is an error naming it."""
    if not folder.is_dir():
        raise ValueError(f"plugin folder {folder}: not a folder")
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        module_name = f"dreambench_plugins.{path.stem}_{digest}"  # unique per file
        if module_name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ValueError(f"plugin {path}: {type(exc).__name__}: {exc}") from exc
