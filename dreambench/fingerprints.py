"""Serialisation and fingerprints: how a configuration is written into records and hashed into cache keys.

:func:`fingerprint` hashes what :func:`fingerprint_view` shows of its parts: JSON of the dataclasses without
the fields that sit at their :func:`added_option` value, so an option added with the value that reproduces
the earlier behaviour leaves every earlier fingerprint (results, checkpoints, caches) as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def added_option(previous: Any) -> dict[str, Any]:
    """Field metadata for an option added after results were recorded, ``previous`` being the value that does
    what the code did before the option existed. At that value the field stays out of fingerprints, so results,
    checkpoints and caches recorded before it existed remain valid (a test holds every such field to this)."""
    return {"fingerprint_omits": previous}


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


# Field metadata for a setting that changes only speed or disk use, never a number (a test holds each such
# setting's results bit for bit equal both ways): it stays out of result fingerprints, so switching it reuses
# the same results and checkpoints.
NOT_A_DEPENDENCY = {"dependency": False}


def fingerprint_view(obj: Any) -> Any:
    """``to_jsonable(obj)`` without the dataclass fields that sit at their :func:`added_option` value: what
    fingerprints hash."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        view = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if "fingerprint_omits" in f.metadata and to_jsonable(value) == to_jsonable(
                f.metadata["fingerprint_omits"]
            ):
                continue
            view[f.name] = fingerprint_view(value)
        return view
    if isinstance(obj, Mapping):
        return {str(k): fingerprint_view(v) for k, v in sorted(obj.items())}
    if isinstance(obj, (list, tuple)):
        return [fingerprint_view(v) for v in obj]
    return to_jsonable(obj)


def dependencies_of(params: Any) -> dict[str, Any]:
    """``fingerprint_view(params)`` of a dataclass without its fields marked :data:`NOT_A_DEPENDENCY`."""
    skip = {f.name for f in dataclasses.fields(params) if f.metadata.get("dependency") is False}
    return {k: v for k, v in fingerprint_view(params).items() if k not in skip}


def fingerprint(*parts: Any, length: int = 12) -> str:
    """A short stable hash of JSON-serialisable parts (dataclasses included, as :func:`fingerprint_view` shows
    them); keys every cache."""
    blob = json.dumps([fingerprint_view(p) for p in parts], sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:length]


def previous_values(cls: type) -> dict[str, Any]:
    """Each option of the dataclass ``cls`` added with :func:`added_option`: its value before it existed (what
    a record written before then ran with)."""
    fields = dataclasses.fields(cls)
    return {f.name: f.metadata["fingerprint_omits"] for f in fields if "fingerprint_omits" in f.metadata}
