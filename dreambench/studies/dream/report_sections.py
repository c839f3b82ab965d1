"""What the DREAM study adds to every report: the paper's claims checked on the results, its ablations titled
after its figures, DREAM's training signal before training, and the paper's own numbers beside ours.

``REPORT`` is the study's :class:`~dreambench.report.StudyReport` (``DreamStudy.report()`` returns it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...evaluation.metrics import MAIN_METRIC
from ...method import METHODS
from ...report import (
    GroupFigure,
    ReportContext,
    Section,
    StudyReport,
    markdown_table,
    row_label,
    runs_learned,
)
from ...tasks import TASKS
from .signal_check import format_rows

# ---- the paper's claims (DREAM §4.2 and §5–6) checked on this profile's results ------------------------------

PAPER_METHOD_NAMES = {
    "bm25": "BM25",
    "infonce": "InfoNCE",
    "replug": "REPLUG",
    "revela": "Revela",
    "dream": "DREAM",
}
# where the paper compares DREAM with each baseline; a baseline added since is compared all the same
PAPER_TABLES = {"infonce": "Tables 1, 4–5", "replug": "Tables 1, 4–5", "revela": "Tables 1, 4–5"}
PAPER_HEAD_COUNTS = (1, 4, 8, 16, 32, 64)  # Fig. 3; the paper finds 16 best


def baseline_claims() -> list[tuple[str, str]]:
    """(claim, baseline): DREAM against every other trained method of the main table, in row order."""
    baselines = sorted(
        (cls for name, cls in METHODS.items() if cls.main_table and cls.trainable and name != "dream"),
        key=lambda cls: (cls.row_order, cls.name),
    )
    return [
        (f"DREAM beats {PAPER_METHOD_NAMES.get(cls.name, cls.name)} "
         f"({PAPER_TABLES.get(cls.name, 'not in the paper')})", cls.name)
        for cls in baselines
    ]  # fmt: skip


def _seeds_label(seeds: set[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))}"


def _seeds_count(seeds: set[int]) -> str:
    return "one seed" if len(seeds) == 1 else f"{len(seeds)} seeds"


def claims_table(
    frame: pd.DataFrame, main: pd.DataFrame, p_values: pd.DataFrame, training: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Each of the paper's claims checked on these results, whichever way it falls.

    Main-table claims: per dataset, DREAM's mean NDCG@10 against the baseline's over the seeds both ran, with
    the number of sets where the paired test (corrected; the table's marks) finds DREAM significantly ahead or behind.
    Verdict: *does not hold* when DREAM is behind on every dataset or significantly behind on any; *holds* when
    it is ahead on every dataset and significantly ahead on at least one (*ahead, not significantly* when on
    none); *mixed* otherwise. When DREAM or the baseline did not learn in every one of those seeds (``training``:
    the held-out top-1 did not rise), the verdict says so: it then compares a model that barely moved. Ablation claims
    compare the rows at the seeds both ran (the default's runs of those seeds as reference) by the mean over
    the ablation's sets and those seeds (no significance test: an ablation has one to three seeds), and say in
    how many of them each row learned.
    """
    rows = []
    sets = [c for c in main.columns if not str(c).startswith("avg ")]
    scores = frame[frame.metric == MAIN_METRIC]
    scores = scores.assign(
        row=[row_label(m, e) for m, e in zip(scores.method, scores.experiment, strict=True)]
    )
    learned_runs = runs_learned(training)

    def seeds_of(row: str, dataset: str) -> set[int]:
        return {int(k) for k in scores[(scores.row == row) & (scores.dataset == dataset)].seed.dropna()}

    def at_seeds(row: str, dataset: str, seeds: set[int]) -> float:
        sub = scores[(scores.row == row) & (scores.dataset == dataset) & scores.seed.isin(seeds)]
        return float(sub.value.mean())

    for claim, other in baseline_claims():
        # per set, the seeds both ran: DREAM's mean over three seeds is not set against one run of a baseline
        matched = {d: seeds_of("dream", d) & seeds_of(other, d) for d in sets}
        matched = {d: k for d, k in matched.items() if k}
        diff = pd.Series(
            {d: at_seeds("dream", d, k) - at_seeds(other, d, k) for d, k in matched.items()}, dtype=float
        )
        if diff.empty:
            rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
            continue
        tested = p_values.loc[other].reindex(diff.index) if other in p_values.index else diff * float("nan")
        significant = diff[tested < 0.05]
        ahead, behind = int((diff > 0).sum()), int((diff < 0).sum())
        sig_ahead, sig_behind = int((significant > 0).sum()), int((significant < 0).sum())
        if sig_behind or behind == len(diff):
            verdict = "does not hold"
        elif ahead == len(diff):
            verdict = "holds" if sig_ahead else "ahead, not significantly"
        else:
            verdict = "mixed"
        seeds = set.union(*matched.values())
        measured = (f"ahead on {ahead} of {len(diff)} sets, behind on {behind}; mean difference {diff.mean():+.4f} "
                    f"({_seeds_label(seeds)}, those both ran); significantly ahead on {sig_ahead}, significantly "
                    f"behind on {sig_behind} (p < 0.05)")  # fmt: skip
        stalled = [(m, sum(learned_runs[(m, k)] for k in seeds), len(seeds)) for m in ("dream", other)
                   if all((m, k) in learned_runs for k in seeds)]  # fmt: skip
        stalled = [(m, r, n) for m, r, n in stalled if r < n]
        if stalled:
            measured += "; " + "; ".join(f"{m} learned in {r} of {n} seed(s)" for m, r, n in stalled)
            verdict += f" — but {' and '.join(m for m, _, _ in stalled)} did not learn in every seed"
        rows.append({"claim": claim, "measured": measured, "verdict": verdict})

    def complete_seeds(row: str, datasets: list[str]) -> set[int]:
        """The seeds at which ``row`` has a result on every one of ``datasets``."""
        sub = scores[(scores.row == row) & scores.dataset.isin(datasets)]
        return (
            {int(k) for k, runs in sub.groupby("seed") if set(runs.dataset) >= set(datasets)}
            if datasets
            else set()
        )

    def mean_over(row: str, datasets: list[str], seeds: set[int]) -> float:
        sub = scores[(scores.row == row) & scores.dataset.isin(datasets) & scores.seed.isin(seeds)]
        return float(sub.value.mean())

    def matched(rows: list[str], datasets: list[str]) -> tuple[set[int], str, str]:
        """The seeds every row ran on every dataset; how many of them each row learned in (where known); and
        the verdict's caveat naming the rows that did not learn in every one of them."""
        seeds = set.intersection(*(complete_seeds(r, datasets) for r in rows)) if rows else set()
        learned = [
            (r, sum(learned_runs[(r, k)] for k in seeds))
            for r in rows
            if all((r, k) in learned_runs for k in seeds)
        ]
        note = (
            "; learned in: " + ", ".join(f"{r} {n} of {len(seeds)}" for r, n in learned)
            if seeds and learned
            else ""
        )
        stalled = [r for r, n in learned if n < len(seeds)]
        caveat = f" — but {' and '.join(stalled)} did not learn in every seed" if seeds and stalled else ""
        return seeds, note, caveat  # fmt: skip

    dream = frame[(frame.method == "dream") & (frame.experiment == "default")]
    heads = int(dream.params.iloc[0].get("num_heads", 16)) if not dream.empty else 16
    k = (
        int(dream.num_candidates.iloc[0])
        if not dream.empty and pd.notna(dream.num_candidates.iloc[0])
        else 16
    )

    def head_row(n: int) -> str:
        return "dream" if n == heads else f"dream/heads-top{n}"

    def k_row(n: int) -> str:
        return "dream" if n == k else f"dream/candidates-{n}"

    ablation_claims = (
        ("QRHead heads beat random heads (Fig. 2)", "dream", "dream/heads-random", "ablation-head-selection"),
        ("QRHead heads beat random middle-layer heads (Fig. 2)", "dream", "dream/heads-random-middle",
         "ablation-head-selection"),
        ("16 candidates beat 4 (Fig. 6)", k_row(16), k_row(4), "ablation-candidates"),
        ("a frozen judge is at least as good as a LoRA-trained one (Fig. 5)", "dream", "dream/judge-lora",
         "ablation-judge"),
    )  # fmt: skip
    for claim, ours, theirs, group in ablation_claims:
        datasets = sorted(set(scores[scores.group == group].dataset))
        seeds, note, caveat = matched([ours, theirs], datasets)
        if not seeds:
            rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
            continue
        a, b = mean_over(ours, datasets, seeds), mean_over(theirs, datasets, seeds)
        holds = a >= b if "at least" in claim else a > b
        rows.append({"claim": claim, "measured": f"{a:.4f} vs {b:.4f} (mean NDCG@10 over {len(datasets)} sets and "
                                                 f"{_seeds_label(seeds)}){note}",
                     "verdict": f"{'holds' if holds else 'does not hold'} ({_seeds_count(seeds)}){caveat}"})  # fmt: skip
    datasets = sorted(set(scores[scores.group == "ablation-head-count"].dataset))
    claim = "16 heads is the best head count (Fig. 3)"
    # progressive: the head counts run so far (at seeds the default also ran); a count that beats 16 already
    # decides the claim, while 16 ahead of the others decides it only once every count has run
    ran = [n for n in PAPER_HEAD_COUNTS if complete_seeds(head_row(n), datasets)]
    decidable = 16 in ran and len(ran) > 1
    seeds, note, caveat = matched([head_row(n) for n in ran], datasets) if decidable else (set(), "", "")
    if seeds:
        counts = {n: mean_over(head_row(n), datasets, seeds) for n in ran}
        best = max(counts, key=counts.get)
        left = [n for n in PAPER_HEAD_COUNTS if n not in ran]
        pending = f"; top {', '.join(map(str, left))} not run yet" if left else ""
        if best != 16:
            verdict = f"does not hold ({_seeds_count(seeds)}){caveat}"
        elif left:
            verdict = f"– (16 best so far; {_seeds_count(seeds)})"
        else:
            verdict = f"holds ({_seeds_count(seeds)}){caveat}"
        measured = (
            ", ".join(f"top {n} {v:.4f}" for n, v in counts.items())
            + f" ({_seeds_label(seeds)}){note}{pending}"
        )
        rows.append({"claim": claim, "measured": measured, "verdict": verdict})
    else:
        rows.append({"claim": claim, "measured": "not run yet", "verdict": "–"})
    return pd.DataFrame(rows).set_index("claim")


def claims(ctx: ReportContext) -> list[str]:
    table = claims_table(ctx.frame, ctx.main, ctx.p_values, ctx.training)
    table.to_csv(ctx.out / "claims.csv")
    return [
        "## The paper's claims at this scale",
        "",
        "Checked on the results above, whichever way they fall. Against a baseline: DREAM's mean NDCG@10 per set "
        "over the seeds both ran and the paired tests of the table; *does not hold* = behind on every set or significantly "
        "behind on one; *holds* = ahead on every set and significantly ahead on at least one (*ahead, not "
        "significantly* when on none); else *mixed*. Ablations: "
        "the seeds the ablation ran, the default's runs of the same seeds as reference, "
        "mean over the ablation's sets and those seeds, with how many of those seeds each row learned in "
        "(Training, below) and a caveat in the verdict where a row did not learn in every one: a run that did "
        "not learn is a model that barely moved from the untrained one.",
        "",
        markdown_table(table),
        "",
    ]


# ---- the ablations, titled after the paper's figures -----------------------------------------------------

ABLATION_FIGURES = {  # in the paper's order, which is the report's
    "ablation-head-selection": GroupFigure("Selected vs random heads (DREAM Fig. 2)"),
    "ablation-head-count": GroupFigure("Number of selected heads (DREAM Fig. 3)", "num_heads", log2_x=True),
    "ablation-judge": GroupFigure("Frozen judge vs judge LoRA (DREAM Fig. 5)"),
    "ablation-candidates": GroupFigure("Number of candidates K (DREAM Fig. 6)", "num_candidates"),
    "variant-injected-rows": GroupFigure("Injected rows: query (paper) vs query + target (variant)"),
}
CURVE_TITLES = {"tau": "DREAM τ (softmax temperature)", "gate": "DREAM g = σ(γ) (injection gate)"}

# ---- DREAM's training signal before training (the study's signal check) ---------------------------------


def signal_table(results_dir: Path, profile: str) -> pd.DataFrame:
    """DREAM's signal checks stored under ``results/<profile>/signal/`` (``python -m dreambench.cli.signal_check``)."""
    rows = []
    for path in sorted((results_dir / profile / "signal").glob("*.json")):
        payload = json.loads(path.read_text())
        rows += [{**row, "command": payload.get("command")} for row in format_rows(payload)]
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows).drop(columns=["p"])
    return table.sort_values(["judge", "layout", "rows", "g", "heads"]).set_index("judge")


SIGNAL_NOTE = (
    "Measured on the held-out instances before any training (the commands are listed below the table). Mean target-token loss of the frozen judge with no injection (g = 0) and with the "
    "heads' query rows re-weighted by p one-hot on the target, uniform, one-hot on a wrong candidate; "
    "`oracle gap` = loss uniform − loss target (what a perfect retriever could gain), `wrong gap` = loss "
    "wrong − loss target, both in nats per target token. `favours target`: share of instances whose gradient "
    "−∂L/∂p at uniform p is largest for the target (the direction DREAM's first steps push), with its exact "
    "95% interval; `chance` = 1/K. `alignment`: mean cosine between −∂L/∂s and the contrastive direction "
    "(one-hot target − uniform)."
)


def signal(ctx: ReportContext) -> list[str]:
    table = signal_table(ctx.results_dir, ctx.profile)
    if table.empty:
        return []
    table.to_csv(ctx.out / "signal.csv", float_format="%.4f")
    return [
        "## DREAM's training signal, before training",
        "",
        SIGNAL_NOTE,
        "",
        markdown_table(table.drop(columns=["command"])),
        "",
        "Commands (one per check, in table order):",
        "",
        *[f"- `{c}`" for c in dict.fromkeys(table["command"]) if c],
        "",
    ]


# ---- published numbers: reproduction checks and the paper's table ---------------------------------------


@dataclass(frozen=True)
class ReferenceCheck:
    """A published number a run must reproduce (Pyserini 2CR style)."""

    method: str
    dataset: str
    params: dict[str, Any]  # the method parameters the reference assumes
    metric: str
    expected: float
    tolerance: float
    source: str


REFERENCE_CHECKS = (
    ReferenceCheck("bm25", "scifact", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, MAIN_METRIC, 0.6789, 5e-5,
                   "Anserini BEIR regression (flat)"),
    ReferenceCheck("bm25", "arguana", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, MAIN_METRIC, 0.3970, 5e-5,
                   "Anserini BEIR regression (flat)"),
    ReferenceCheck("bm25", "nfcorpus", {"k1": 0.9, "b": 0.4, "backend": "lucene"}, MAIN_METRIC, 0.3218, 5e-5,
                   "Anserini BEIR regression (flat)"),
)  # fmt: skip


def reference_checks(frame: pd.DataFrame) -> list[str]:
    lines = []
    for check in REFERENCE_CHECKS:
        hits = frame[
            (frame.method == check.method) & (frame.dataset == check.dataset) & (frame.metric == check.metric)
        ]
        hits = hits[[all(p.get(k, v) == v for k, v in check.params.items()) for p in hits.params]]
        for _, row in hits.iterrows():
            ok = abs(row.value - check.expected) <= check.tolerance
            lines.append(
                f"[{'OK' if ok else 'FAIL'}] {check.method}/{row.experiment} {check.dataset} {check.metric}: "
                f"{row.value:.4f} (expected {check.expected:.4f} ± {check.tolerance:g}, {check.source})"
            )
    return lines


PAPER_REFERENCE_CSV = "dream_paper_ndcg10.csv"


def find_paper_reference() -> Path | None:
    """The DREAM paper's NDCG@10 (Tables 1, 4–5), shipped with the package (``dreambench/reference/``) so
    that every machine renders the same report."""
    path = Path(__file__).resolve().parents[2] / "reference" / PAPER_REFERENCE_CSV
    return path if path.is_file() else None


def paper_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The DREAM paper's NDCG@10 for the methods and datasets present in this run."""
    path = find_paper_reference()
    if path is None or frame.empty:
        return pd.DataFrame()
    paper = pd.read_csv(path)
    datasets = sorted(set(frame.dataset))
    columns = {}
    for name in datasets:
        spec = TASKS.get(name) if name in TASKS else None
        if spec is not None and spec.paper_name:
            columns[spec.paper_name] = name
    methods = {PAPER_METHOD_NAMES[m] for m in set(frame.method) if m in PAPER_METHOD_NAMES}
    sub = paper[paper.task.isin(columns) & paper.method.isin(methods)]
    if sub.empty:
        return pd.DataFrame()
    sub = sub.assign(
        row=[f"{m} ({b})" if b != "-" else m for m, b in zip(sub.method, sub.backbone, strict=True)]
    )
    return sub.pivot_table(index="row", columns="task", values=MAIN_METRIC, aggfunc="first")


def reproduction(ctx: ReportContext) -> list[str]:
    checks = reference_checks(ctx.frame)
    return ["## Reproduction checks", "", "```", *checks, "```", ""] if checks else []


def paper(ctx: ReportContext) -> list[str]:
    table = paper_table(ctx.frame)
    if table.empty:
        return []
    return [
        "## DREAM paper, same methods and tasks (Tables 4–5; full corpora, paper backbones)",
        "",
        markdown_table(table),
        "",
    ]


REPORT = StudyReport(
    reference_label="DREAM",
    sections=(
        Section("claims", claims, after="main table"),
        Section("signal check", signal, after="tuning"),
        Section("reproduction checks", reproduction, after="failed runs"),
        Section("paper", paper, after="reproduction checks"),
    ),
    group_figures=ABLATION_FIGURES,
    curve_titles=CURVE_TITLES,
)
