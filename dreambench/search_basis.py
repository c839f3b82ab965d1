"""The basis of a tuning search: the fingerprint of what its runs depend on, stored in its record as ``basis``, by
which the report and ``--tune`` judge whether a stored search still belongs to the profile's configuration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .config import RunConfig, dependencies_of, fingerprint, fingerprint_view, method_params
from .data.training import data_fingerprint
from .method import METHODS


def tuning_basis(config: RunConfig, method: str, searched: Iterable[str] = ()) -> str:
    """What a search's runs of ``method`` depend on: the data settings and the data's build fingerprint (its
    construction and generation versions, the generator's prompt, the text package's version), the model and
    training settings, and the method's typed parameters (its defaults included, so a changed default counts).
    The ``searched`` keys and ``train.seed``, which every run sets for itself, are left out."""
    if method in METHODS:
        params = dependencies_of(method_params(METHODS.get(method).Params, config, method))
    else:  # an adapter that is not installed here: its overrides as written
        params = dict(config.methods.get(method, {}))
    parts = {"data": fingerprint_view(config.data), "data_build": data_fingerprint(config.data),
             "model": fingerprint_view(config.model), "train": fingerprint_view(config.train), "methods": params}  # fmt: skip
    for key in (*searched, "train.seed"):
        section, _, name = key.partition(".")
        parts.get(section, {}).pop(name.removeprefix(f"{method}.") if section == "methods" else name, None)
    return fingerprint(parts)


def tuning_is_current(record: dict[str, Any], config: RunConfig) -> bool:
    """Whether a tuning record was searched from ``config`` as it is now: its ``basis`` matches (a record written
    before the basis was stored: its whole configuration's fingerprint matches)."""
    if "basis" in record:
        return record["basis"] == tuning_basis(config, record["method"], [k for k, _ in record.get("grid") or []])
    return record.get("base_fingerprint", fingerprint(config)) == fingerprint(config)  # neither: nothing to judge by
