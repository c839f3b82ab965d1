"""``docs/fidelity.md``: every setting of every method against the papers, generated from the profiles.

Each :class:`~dreambench.fidelity_rows.Row` records a setting's value in the papers (with the section), in the
released code where that differs or fills a gap, the value each profile is expected to run, and why a profile
departs from the paper. The values shown are computed from the profiles as run (:func:`actual_value`);
:func:`problems` lists every setting without a row, every row of no setting, and every recorded value that a
profile no longer runs, so that changing a profile forces its row (and its reason) to be revisited.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .config import RunConfig, method_params
from .experiment import Experiment, Profile
from .fidelity_rows import PROFILE_ORDER, ROWS, Row, Varies
from .method import METHODS, DenseMethod
from .profiles import PROFILES

SECTIONS = ("data", "model", "train", "eval")  # the shared config areas, in the order the document shows them
SECTION_TITLES = {"data": "Data", "model": "Model (retriever)", "train": "Training", "eval": "Evaluation"}
DEFAULT_CONCERNS = {"data": "trained", "model": "dense", "train": "trained", "eval": "all"}
COMMAND = "python -m dreambench.cli.fidelity"
DOC_PATH = "docs/fidelity.md"
MAX_LIST_CHARS = 64  # a longer list shows its first three items and its length


# ----------------------------------------------------------------------------------------------------------
# the settings and their values as run


def _leaf_fields(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys += _leaf_fields(hints[f.name], f"{prefix}.{f.name}")
        else:
            keys.append(f"{prefix}.{f.name}")
    return keys


SHIPPED_PACKAGE = "methods"  # the adapters this document covers; methods added through a search path are not


def method_order() -> list[str]:
    """The shipped methods (adapters of the ``methods`` package) in the report's row order: a method added
    through the method search path or an entry point compares itself with no paper here."""
    return [
        name
        for _, name in sorted((cls.row_order, name) for name, cls in METHODS.items())
        if METHODS.get(name).__module__.split(".")[0] == SHIPPED_PACKAGE
    ]


def setting_keys() -> list[str]:
    """Every setting, as config overrides spell it: the leaf fields of the shared config areas, then every
    field of every registered method's ``Params``."""
    hints = typing.get_type_hints(RunConfig)
    keys = [key for section in SECTIONS for key in _leaf_fields(hints[section], section)]
    for name in method_order():
        keys += [f"methods.{name}.{f.name}" for f in dataclasses.fields(METHODS.get(name).Params)]
    return keys


def concerned_methods(row: Row) -> list[str]:
    """The methods a row's setting applies to: its own method for ``methods.<m>.*``, else its ``methods``
    (``all``, ``dense``, ``trained`` or comma-separated names; by default its area's)."""
    if row.key.startswith("methods."):
        return [row.key.split(".")[1]]
    group = row.methods or DEFAULT_CONCERNS[row.key.split(".")[0]]
    names = method_order()
    if group == "all":
        return names
    if group == "dense":
        return [n for n in names if issubclass(METHODS.get(n), DenseMethod)]
    if group == "trained":
        return [n for n in names if METHODS.get(n).trainable]
    return [n.strip() for n in group.split(",")]


def main_experiment(profile: Profile, method: str) -> Experiment:
    """The method's main-table experiment in ``profile`` (its tuned values applied); a method outside the main
    table: the profile's tuned values alone."""
    for experiment in profile.experiments_for(method):
        if experiment.name == "default":
            return experiment
    return Experiment(method, overrides=dict(profile.tuned.get(method, {})))


def _lookup(config: RunConfig, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def actual_value(key: str, profile: Profile | str, method: str) -> Any:
    """The value of ``key`` that ``method`` runs under ``profile`` (a profile or its name): for
    ``methods.<m>.<field>`` the adapter's ``Params`` after the profile's config and the method's main
    experiment; otherwise the resolved config of that experiment."""
    if isinstance(profile, str):
        profile = PROFILES.get(profile)
    config = main_experiment(profile, method).resolve(profile.config)
    if key.startswith("methods."):
        _, name, field_name = key.split(".")
        return getattr(method_params(METHODS.get(name).Params, config, name), field_name)
    return _lookup(config, key)


def profile_value(row: Row, profile: Profile) -> Any:
    """What ``profile`` runs for ``row``: one value, or :class:`Varies` when some method's main experiment
    changes the profile's own value."""
    methods = concerned_methods(row)
    if row.key.startswith("methods."):
        return actual_value(row.key, profile, methods[0])
    base = _lookup(profile.config, row.key)
    others = {m: v for m in methods if (v := actual_value(row.key, profile, m)) != base}
    return Varies(base, others) if others else base


def _normalise(value: Any) -> Any:
    return value.base if isinstance(value, Varies) and not value.by_method else value


# ----------------------------------------------------------------------------------------------------------
# consistency of the rows with the code


def coverage_problems(rows: Sequence[Row] = ROWS) -> list[str]:
    """Settings without a row, settings with several, and rows of no setting."""
    keys = setting_keys()
    known = set(keys)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.key] = counts.get(row.key, 0) + 1
    problems = [f"{key}: no row" for key in keys if key not in counts]
    problems += [f"{key}: {n} rows" for key, n in counts.items() if n > 1]
    problems += [
        f"{row.key}: a row for a setting that does not exist" for row in rows if row.key not in known
    ]
    for row in rows:
        if row.key in known and not row.key.startswith("methods."):
            unknown = [m for m in concerned_methods(row) if m not in METHODS]
            problems += [f"{row.key}: concerns unknown method {m!r}" for m in unknown]
    return problems


def value_problems(profiles: Iterable[Profile] | None = None, rows: Sequence[Row] = ROWS) -> list[str]:
    """Every row whose recorded value for a profile is not what that profile runs, naming key and profile."""
    known = set(setting_keys())
    problems = []
    for profile in profiles if profiles is not None else [PROFILES.get(n) for n in PROFILE_ORDER]:
        for row in rows:
            if row.key not in known:
                continue
            recorded, actual = _normalise(row.value(profile.name)), profile_value(row, profile)
            if recorded != actual:
                problems.append(
                    f"{row.key} [{profile.name}]: the row records {format_value(recorded)}, "
                    f"the profile runs {format_value(actual)}"
                )
    return problems


def problems() -> list[str]:
    return coverage_problems() + value_problems()


# ----------------------------------------------------------------------------------------------------------
# rendering


def _number(value: float) -> str:
    """1e-4 rather than 0.0001; 0.05 and 1.0 as written."""
    if value != 0 and (abs(value) < 0.02 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return repr(value)


def format_value(value: Any) -> str:
    """A short Markdown cell for a setting's value."""
    if isinstance(value, Varies):
        exceptions = ", ".join(f"{m}: {format_value(v)}" for m, v in sorted(value.by_method.items()))
        return f"{format_value(value.base)} ({exceptions})"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return f"`{value}`" if value and value == value.strip() else f'`"{value}"`'
    if isinstance(value, (tuple, list)):
        shown = ", ".join(str(v) for v in value)
        if len(shown) > MAX_LIST_CHARS:
            shown = ", ".join(str(v) for v in value[:3]) + f", … ({len(value)} in all)"
        return f"`{shown}`" if shown else "()"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) or "{}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def _table(
    keys: Sequence[str], rows: Mapping[str, Row], profiles: Sequence[Profile], shared: bool
) -> list[str]:
    lines = [
        "| setting | paper (section) | released code | smoke | mini | gpu | paper profile | why it differs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        row = rows.get(key)
        if row is None:
            continue
        setting = f"`{key}`" + (f" ({row.methods or DEFAULT_CONCERNS[key.split('.')[0]]})" if shared else "")
        why = "; ".join(p for p in ("engineering" if row.engineering else "", row.why, row.gpu_why) if p)
        values = [format_value(profile_value(row, p)) for p in profiles]
        cells = [setting, _cell(row.paper), _cell(row.code), *values, _cell(why)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


HEADER = f"""# Fidelity: every setting against the papers

Generated by `{COMMAND}` from the rows in `dreambench/fidelity_rows.py` and the
profiles in `dreambench/profiles.py`: do not edit it by hand. `tests/test_fidelity.py` fails when this file
is not what the command writes, when a setting has no row, or when a profile runs a value its row does not
record.

- **Values** are what each profile runs: its config with each method's main-table experiment applied (tuned
  values included). `a (m: b)`: the profile's value is `a`, and method `m`'s main experiment runs `b`. A
  shared setting names the methods it concerns in parentheses.
- **Paper**: DREAM (Tang & Yang), Revela (Cai et al., ICLR 2026), REPLUG (Shi et al., NAACL 2024; its
  values as Revela App. B.3 adapts it), DiffRetriever. "not specified": the paper gives no value.
- **Released code**, where it differs from the paper or gives a value the paper does not: TRUMANCFY/Revela
  at 920fefc (`train.sh`, `arguments.py`, `collator.py`); swj0419/REPLUG (`LSR_finetune/replug_lsr.py` at
  8337b5c, `README.md` at 1e418e0); ielab/PromptReps (`encode.py`, `hybrid.py`, `prompts/`).
- **engineering**: the setting changes speed, memory or disk use, not what the method computes (numbers
  equal up to float rounding at most).
"""

METHOD_NOTES = {
    "replug": "Loss KL(P_LM ‖ P_R), as in Revela App. B.3 and the released LSR code (`torch.nn.KLDivLoss`, "
    "the LM's softmax as target); the REPLUG paper (§4) writes KL(P_R ‖ Q_LM).",
    "diffretriever": "Zero-shot only (the paper also fine-tunes). Sparse vectors keep the text's own content "
    "words as PromptReps' released code does (DiffRetriever: lowercase content tokens of the vocabulary). Dense "
    "vectors L2-normalised before MaxSim. No diffusion LM is offline: mini lists it as online only; the tests "
    "run it on the tiny random Llama given a bidirectional mask, which has a diffusion LM's interface.",
    "drama": "Trained with LoRA on the suite's backbone and budget like every method (Drama: full fine-tuning "
    "of a pruned Llama-3.2-1B, batch 2,048 × 7 hard negatives, 200k steps, plus in-batch negatives); the 7 hard "
    "negatives are the other chunks of the query's candidate set; pruning is the shared `model.backbone_layers` "
    "option (depth only), not Drama's learned structured pruning and continued pretraining.",
    "llmql": "Both stages train the same LoRA adapters under one schedule and learning rate (LLM-QL: full "
    "fine-tuning at 1e-5 for QL, then LoRA at 1e-4); the QL input is the passage as the suite's retriever "
    "encodes it (`Passage: ` + chunk + EOS, EOS being [E]) instead of LLM-QL's summarisation instructions, so "
    "that [E] is the token the embedding is read from; corrupted tokens become the tokenizer's unknown token; "
    "the query is the instance's generated query (LLM-QL: MS MARCO's annotated queries).",
    "promptreps": "Prompt as DiffRetriever Table 1 gives PromptReps' single-word prompt (system message, "
    '`Use one word to represent the … in a retrieval task. Make sure your word is in lowercase.`, answer opened '
    'with `The word is "`); the released prompts vary by model (e.g. "Use one most important word …", '
    '`The word is: "`). Stop words: NLTK\'s English list (as `bm25s` ships it) and punctuation, as the released '
    "code; words split on word characters instead of NLTK's tokenizer (its data is a download). Zero-shot "
    "only: the supervised PromptReps variant is not part of the suite.",
}


def render_fidelity() -> str:
    """The Markdown of ``docs/fidelity.md``."""
    profiles = [PROFILES.get(name) for name in PROFILE_ORDER]
    rows = {row.key: row for row in ROWS}
    keys = setting_keys()
    lines = [HEADER]
    for section in SECTIONS:
        lines += [f"## {SECTION_TITLES[section]}", ""]
        lines += _table([k for k in keys if k.split(".")[0] == section], rows, profiles, shared=True) + [""]
    for name in method_order():
        prefix = f"methods.{name}."
        method_keys = [k for k in keys if k.startswith(prefix)]
        if not method_keys:
            continue
        lines += [f"## Method `{name}` (`{prefix}*`)", ""]
        if name in METHOD_NOTES:
            lines += [METHOD_NOTES[name], ""]
        lines += _table(method_keys, rows, profiles, shared=False) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"
