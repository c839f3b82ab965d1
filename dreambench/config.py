"""Typed configuration: frozen dataclasses, loadable from TOML, overridable with dotted ``key=value`` pairs.

A run is described by one :class:`RunConfig`. Profiles (``dreambench.profiles``) are named RunConfigs plus a
list of experiments; an experiment (an ablation, say) is a named delta of the profile's config. Everything a
result depends on is stored with the result, and :func:`fingerprint` of the relevant parts keys every cache.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from .fingerprints import (  # noqa: F401  (re-exported: the configuration's serialisation)
    NOT_A_DEPENDENCY,
    added_option,
    dependencies_of,
    fingerprint,
    fingerprint_view,
    to_jsonable,
)
from .registry import UnknownNameError

# raises UnknownNameError for an unknown method name (the method registry's ``get``)
MethodCheck = Callable[[str], Any]


class ConfigError(ValueError):
    """A configuration value or file that cannot be used; the message names the option or file."""


@dataclass(frozen=True)
class ModelConfig:
    """The embedding backbone every dense method trains and evaluates (shared for a fair comparison)."""

    backbone: str = "smollm2-135m-instruct"  # alias (see dreambench.models.backbones), hub id or local path
    # the text around what the retriever encodes: "prefix" (query_prefix/passage_prefix + text + EOS, pooled at
    # the EOS) or "promptreps" (the one-word chat prompt of dreambench.models.prompts around the text, pooled at
    # the opened answer: PromptReps' dense representation; the length caps then count the text's tokens)
    input_template: str = field(default="prefix", metadata=added_option("prefix"))
    query_prefix: str = "Query: "
    passage_prefix: str = "Passage: "
    max_query_tokens: int = 64
    max_passage_tokens: int = 256
    # keep only the first N decoder layers (0: all): depth pruning, Drama's smaller-backbone idea (§3.2) in its
    # simplest form; the cost of every retriever forward and backward falls in proportion
    backbone_layers: int = field(default=0, metadata=added_option(0))
    lora_r: int = 32  # DREAM §4.1: LoRA on q/k/v/o, rank 32, alpha 64
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    precision: str = "auto"  # auto | bf16 | fp32: bf16 autocast where the hardware supports it
    encode_batch_size: int = 16  # measured best on 2 CPU cores (1,760 tok/s vs 1,710 at 32)


@dataclass(frozen=True)
class DataConfig:
    """The one training set every trained method consumes (DREAM format: query, K candidates, target)."""

    source: str = "wiki-offline"  # wiki-offline | tevatron-wiki-nq | synthetic (tests)
    num_train: int = 400  # training instances (candidate sets with a query and a target)
    num_heldout: int = 100  # held-out instances in the same format, from articles never trained on
    num_probe: int = 128  # head-selection probe instances (drawn from the training articles, as in DREAM)
    num_candidates: int = 8  # K
    # "one-document": each candidate set is K consecutive chunks of one article, the target among them (DREAM
    # §4.1: "each document is split into 16 chunks, forming one candidate chunk set"); "mixed": the target's
    # sibling chunks, then BM25 neighbours from other articles (this suite's construction before)
    candidate_sets: str = field(default="one-document", metadata=added_option("mixed"))
    chunk_max_words: int = 48
    chunk_min_words: int = 8
    query_source: str = "generate"  # generate (DREAM App. A prompt) | crop (one sentence of the target)
    query_generator: str = "smollm2-135m-instruct"
    query_max_new_tokens: int = 48
    query_batch_size: int = 1  # 1: each query independent of the others (a fresh clone rebuilds the same data)
    query_precision: str = "fp32"  # fp32 | bf16 | auto (generation; fp32 is also the faster one on CPU here)
    eval_articles: int = 600  # held-out articles forming the description→lead evaluation set
    eval_queries: int = 300
    seed: int = 13


@dataclass(frozen=True)
class TrainConfig:
    """The trainer core's settings (shared by every trained method)."""

    steps: int = 100  # optimiser steps
    batch_size: int = 1  # instances per micro-batch
    grad_accum: int = 4
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    schedule: str = "linear"  # linear | cosine | constant (after warmup)
    max_grad_norm: float = 1.0
    precision: str = "auto"  # auto | bf16 | fp32 (autocast)
    # retrieval scores s, p = softmax(s/τ) and Revela's Sim: "fp32" (the backbone may still run in bf16) or
    # "autocast" (rounded to bf16 with the backbone: ~0.004 near 0.5, coarser than untrained candidates' spread)
    score_precision: str = field(default="fp32", metadata=added_option("autocast"))
    checkpoint_every: int = 25
    log_every: int = 1
    seed: int = 0


@dataclass(frozen=True)
class EvalConfig:
    datasets: tuple[str, ...] = ()
    split: str = "test"
    depth: int = 100  # ranking depth written per query (NDCG@10 and recall@100 need 100)
    search_backend: str = "auto"  # auto | torch | faiss (exact inner product either way)
    ignore_identical_ids: bool = True  # drop doc == query id hits (ArguAna), as BEIR and Anserini do
    # evaluation lengths (prefix + text + EOS; Revela §4.1: 2,048), apart from training's; 0: model.max_*_tokens
    max_query_tokens: int = field(default=2048, metadata=added_option(0))
    max_passage_tokens: int = field(default=2048, metadata=added_option(0))


@dataclass(frozen=True)
class RunConfig:
    profile: str = "mini"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # Per-method parameters, validated by each adapter's own ``Params`` dataclass: {"dream": {"num_heads": 16}}
    methods: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------
# coercion and overrides


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert ``value`` (from TOML or a command-line string) to ``annotation``; raise ConfigError naming ``where``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors))
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {allowed}")
        return value
    if origin is tuple:
        (item_type, *_rest) = typing.get_args(annotation)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value))
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return int(as_float)
    if annotation is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
        if not math.isfinite(number):  # inf or nan would only surface later, as a NaN loss
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return number
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if annotation is Any:
        return value
    raise ConfigError(f"{where}: unsupported option type {annotation!r}")


def make_dataclass_from(
    cls: type, values: Mapping[str, Any], where: str, base: Any = None, check_method: MethodCheck | None = None
) -> Any:
    """Build ``cls`` (a frozen dataclass) from ``base`` (or its defaults) updated with ``values``.

    Unknown keys are errors that name ``where`` and list the known keys. ``check_method``: raises
    :class:`~dreambench.registry.UnknownNameError` for a ``[methods.<name>]`` table of no registered method (the
    caller passes the method registry's ``get``; this module knows no registry).
    """
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    updates = {}
    for key, value in values.items():
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown option {key!r}{hint}; known: {', '.join(known)}")
        if dataclasses.is_dataclass(hints[key]):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.{key}: expected a table of options, got {value!r}")
            current = getattr(base, key) if base is not None else hints[key]()
            updates[key] = make_dataclass_from(hints[key], value, f"{where}.{key}", current)
        elif key == "methods" and cls is RunConfig:
            if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
                raise ConfigError(f"{where}.methods: expected [methods.<name>] tables, got {value!r}")
            merged = {k: dict(v) for k, v in (base.methods if base is not None else {}).items()}
            for method, params in value.items():
                if check_method is not None:
                    _check_method_name(check_method, method, f"{where}.methods.{method}")
                merged.setdefault(method, {}).update(params)
            updates[key] = merged
        else:
            updates[key] = _coerce(value, hints[key], f"{where}.{key}")
    try:
        return dataclasses.replace(base, **updates) if base is not None else cls(**updates)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def dotted_to_nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """{"train.lr": 1e-4, "methods.dream.num_heads": 8} → {"train": {"lr": 1e-4}, "methods": {"dream": {...}}}."""
    nested: dict[str, Any] = {}
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(f"malformed option name {dotted!r}")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"option {dotted!r} conflicts with another override")
        node[parts[-1]] = value
    return nested


def apply_overrides(
    config: RunConfig, overrides: Mapping[str, Any], where: str = "override", check_method: MethodCheck | None = None
) -> RunConfig:
    return make_dataclass_from(RunConfig, dotted_to_nested(overrides), where, base=config, check_method=check_method)


def parse_cli_overrides(pairs: list[str]) -> dict[str, str]:
    """``["train.lr=1e-4", ...]`` → ``{"train.lr": "1e-4"}``; values are coerced later against the field types."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


def load_config_file(path: str | Path, base: RunConfig, check_method: MethodCheck | None = None) -> RunConfig:
    """Apply a TOML file ([model], [data], [train], [eval], [methods.<name>] tables) on top of ``base``."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return make_dataclass_from(RunConfig, values, str(path), base=base, check_method=check_method)


def method_params(params_cls: type, config: RunConfig, method: str) -> Any:
    """The adapter's typed parameters: its dataclass defaults updated with ``config.methods[method]``."""
    return make_dataclass_from(params_cls, config.methods.get(method, {}), f"methods.{method}")


# the smallest value each numeric option can take (a value below fails before any work, naming the option)
MINIMUMS: dict[str, float] = {
    "model.max_query_tokens": 2, "model.max_passage_tokens": 2, "model.lora_r": 1, "model.encode_batch_size": 1,
    "data.num_train": 1, "data.num_heldout": 1, "data.num_probe": 1, "data.num_candidates": 2,
    "data.chunk_min_words": 1, "data.query_max_new_tokens": 1, "data.query_batch_size": 1, "data.eval_articles": 1,
    "data.eval_queries": 1, "train.steps": 1, "train.batch_size": 1, "train.grad_accum": 1, "train.warmup_steps": 0,
    "train.weight_decay": 0, "train.checkpoint_every": 1, "train.log_every": 1, "eval.depth": 1,
    "eval.max_query_tokens": 8, "eval.max_passage_tokens": 8,  # or 0: the model's (training) length
    "model.backbone_layers": 0,
}  # fmt: skip
POSITIVE = ("train.lr", "train.max_grad_norm", "model.lora_alpha")


CHOICES = {  # options that take one of a few names
    "model.precision": ("auto", "bf16", "fp32"),
    "model.input_template": ("prefix", "promptreps"),
    "data.query_precision": ("auto", "bf16", "fp32"),
    "train.precision": ("auto", "bf16", "fp32"),
    "data.query_source": ("generate", "crop"),
    "train.schedule": ("linear", "cosine", "constant"),
    "train.score_precision": ("fp32", "autocast"),
    "data.candidate_sets": ("one-document", "mixed"),
    "eval.search_backend": ("auto", "torch", "faiss"),
}


def _check_method_name(check_method: MethodCheck, name: str, where: str) -> None:
    try:
        check_method(name)
    except UnknownNameError as exc:
        raise ConfigError(f"{where}: {exc.args[0]}") from None


def check_ranges(config: RunConfig, where: str = "config") -> None:
    """Impossible values (zero steps, K < 2, a non-positive learning rate, …) as one ConfigError."""
    problems = []
    for dotted, low in MINIMUMS.items():
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value < low and not (value == 0 and "eval.max_" in dotted):  # 0: the model's (training) length
            problems.append(f"{dotted} = {value} (must be ≥ {low:g}{' or 0' if 'eval.max_' in dotted else ''})")
    for dotted in POSITIVE:
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if not value > 0:
            problems.append(f"{dotted} = {value} (must be > 0)")
    if config.data.chunk_min_words > config.data.chunk_max_words:
        problems.append(
            f"data.chunk_min_words = {config.data.chunk_min_words} > data.chunk_max_words = {config.data.chunk_max_words}"
        )
    for dotted, choices in CHOICES.items():
        section, name = dotted.split(".")
        if getattr(getattr(config, section), name) not in choices:
            problems.append(
                f"{dotted} = {getattr(getattr(config, section), name)!r} ({', '.join(choices[:-1])} or {choices[-1]})"
            )
    if config.data.eval_queries > config.data.eval_articles:
        problems.append(
            f"data.eval_queries = {config.data.eval_queries} > data.eval_articles = {config.data.eval_articles}"
        )
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
