"""The DREAM paper's claims (§4.2 and §5–6) checked on a profile's results, whichever way they fall, with how
robust each verdict is to the seeds: every verdict is recomputed with each seed left out, and an ablation
claim on fewer than :data:`DECISIVE_SEEDS` seeds is labelled *indicative*."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ...config import method_params
from ...evaluation.metrics import MAIN_METRIC
from ...method import METHODS
from ...profiles import PROFILES
from ...report import row_label, runs_learned, set_balanced_test

# ---- the paper's claims (DREAM §4.2 and §5–6) checked on this profile's results ------------------------------

PAPER_METHOD_NAMES = {
    "bm25": "BM25",
    "infonce": "InfoNCE",
    "replug": "REPLUG",
    "revela": "Revela",
    "dream": "DREAM",
    "drama": "Drama",
    "llmql": "LLM-QL",
}
# where the DREAM paper compares DREAM with each baseline; a baseline added since is compared all the same
PAPER_TABLES = {"infonce": "Tables 1, 4–5", "replug": "Tables 1, 4–5", "revela": "Tables 1, 4–5"}
PAPER_HEAD_COUNTS = (1, 4, 8, 16, 32, 64)  # Fig. 3; the paper finds 16 best
PAPER_CANDIDATE_COUNTS = (4, 8, 16)  # Fig. 6; the paper finds 16 best
NOT_PLANNED = "not in this profile's plan"
DECISIVE_SEEDS = 3  # an ablation claim on fewer seeds is labelled indicative
ALPHA = 0.05  # an ablation's rows differ when the paired test says so at this level (Bonferroni for Fig. 3)
NO_DIFFERENCE = "no significant difference"


def _robustness(seeds: set[int], verdict: str, without) -> str:
    """`` — not robust: …`` naming each seed whose removal changes ``verdict`` (``without(seed)`` recomputes
    it on the other seeds); empty when every leave-one-out verdict agrees or there is one seed only."""
    if len(seeds) < 2:
        return ""
    changed = [(k, without(k)) for k in sorted(seeds)]
    changed = [(k, v) for k, v in changed if v != verdict]
    return (" — not robust: " + "; ".join(f"without seed {k} it reads “{v}”" for k, v in changed)) if changed else ""


def _tuning_caveat(searched: Mapping[str, Mapping[str, Any]] | None, other: str) -> str:
    """`` — but …`` when exactly one of DREAM and ``other`` runs at values its search chose: the comparison then
    sets a tuned method against one at the profile's values."""
    if searched is None or ("dream" in searched) == (other in searched):
        return ""
    tuned, untuned = ("dream", other) if "dream" in searched else (other, "dream")
    values = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in searched[tuned].items())
    return (f" — but {tuned} ran at its searched values ({values}), {untuned} at the profile's (no complete "
            "search on the current configuration)")


def _indicative(seeds: set[int]) -> str:
    return f"; indicative: fewer than {DECISIVE_SEEDS} seeds" if len(seeds) < DECISIVE_SEEDS else ""


def _baseline_verdict(diff: pd.Series, tested: pd.Series) -> str:
    """DREAM against one baseline from the per-set mean differences and their corrected p-values."""
    significant = diff[tested < 0.05]
    ahead, behind = int((diff > 0).sum()), int((diff < 0).sum())
    if int((significant < 0).sum()) or behind == len(diff):
        return "does not hold"
    if ahead == len(diff):
        return "holds" if int((significant > 0).sum()) else "ahead, not significantly"
    return "mixed"


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
    frame: pd.DataFrame,
    main: pd.DataFrame,
    p_values: pd.DataFrame,
    training: pd.DataFrame | None = None,
    p_values_without: dict[int, pd.DataFrame] | None = None,
    planned: set[str] | None = None,
    defaults: tuple[int, int] | None = None,
    searched: Mapping[str, Mapping[str, Any]] | None = None,
    per_query: Mapping[tuple[str, str], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Each of the paper's claims checked on these results, whichever way it falls.

    Main-table claims: per dataset, DREAM's mean NDCG@10 against the baseline's over the seeds both ran, with
    the number of sets where the paired test (corrected; the table's marks) finds DREAM significantly ahead or behind.
    Verdict: *does not hold* when DREAM is behind on every dataset or significantly behind on any; *holds* when
    it is ahead on every dataset and significantly ahead on at least one (*ahead, not significantly* when on
    none); *mixed* otherwise. When DREAM or the baseline did not learn in every one of those seeds (``training``:
    the held-out top-1 did not rise), the verdict says so: it then compares a model that barely moved. Ablation claims
    compare the rows at the seeds both ran (the default's runs of those seeds as reference) by the mean over
    the ablation's sets and those seeds (no significance test), say in how many of them each row learned, and
    are *indicative* on fewer than :data:`DECISIVE_SEEDS` seeds. Every verdict is recomputed with each seed left
    out (``p_values_without``: the significance table without that seed; missing: the baseline claims' tests
    keep every seed) and says which removal changes it. ``planned``: the rows (``method`` or ``method/experiment``)
    the profile's plan runs (None: every row); a claim whose rows it does not plan reads "not in this profile's
    plan" rather than "not run yet", and Fig. 3 compares the head counts it plans. ``defaults``: the profile's
    DREAM head count and K, for the claims' reference rows before DREAM's default row has run. ``searched``:
    per method, the values it runs at where a complete search on the current configuration chose them
    (:func:`searched_values`; None: not known); where one of DREAM and the baseline runs at searched values and
    the other does not, the verdict says so. ``per_query``: (row, dataset) → per-query NDCG@10, a column per
    seed (:func:`per_query_scores` over every group); with it an ablation claim *holds* only where the paired
    test (:data:`ABLATION_TEST`) finds its row ahead at p < :data:`ALPHA`, *does not hold* where it finds the
    other ahead, and reads *no significant difference* otherwise (Fig. 3: 16 heads against each other count,
    Bonferroni-corrected); without it (or where a row lacks per-query scores) the verdict compares the means.
    """

    def absent(*wanted: str) -> str:
        return "not run yet" if planned is None or set(wanted) <= planned else NOT_PLANNED

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

    def tests_for(other: str, index: pd.Index, table: pd.DataFrame) -> pd.Series:
        return table.loc[other].reindex(index) if other in table.index else pd.Series(float("nan"), index=index)

    for claim, other in baseline_claims():
        # per set, the seeds both ran: DREAM's mean over three seeds is not set against one run of a baseline
        matched = {d: seeds_of("dream", d) & seeds_of(other, d) for d in sets}
        matched = {d: k for d, k in matched.items() if k}

        def differences(keep: dict[str, set[int]], other: str = other) -> pd.Series:
            return pd.Series(
                {d: at_seeds("dream", d, k) - at_seeds(other, d, k) for d, k in keep.items()}, dtype=float
            )

        diff = differences(matched)
        if diff.empty:
            rows.append({"claim": claim, "measured": absent("dream", other), "verdict": "–"})
            continue
        tested = tests_for(other, diff.index, p_values)
        significant = diff[tested < 0.05]
        ahead, behind = int((diff > 0).sum()), int((diff < 0).sum())
        sig_ahead, sig_behind = int((significant > 0).sum()), int((significant < 0).sum())
        verdict = _baseline_verdict(diff, tested)
        seeds = set.union(*matched.values())

        def without(seed: int, matched=matched, other=other, differences=differences) -> str:
            keep = {d: k - {seed} for d, k in matched.items() if k - {seed}}
            if not keep:
                return "–"
            rest = differences(keep)
            table = (p_values_without or {}).get(seed, p_values)
            return _baseline_verdict(rest, tests_for(other, rest.index, table))

        def named(sets: pd.Series) -> str:
            return f" ({', '.join(map(str, sets.index))})" if len(sets) else ""

        measured = (f"ahead on {ahead} of {len(diff)} sets, behind on {behind}; mean difference {diff.mean():+.4f} "
                    f"({_seeds_label(seeds)}, those both ran); significantly ahead on {sig_ahead}"
                    f"{named(significant[significant > 0])}, significantly behind on {sig_behind}"
                    f"{named(significant[significant < 0])} (p < 0.05)")  # fmt: skip
        robustness = _robustness(seeds, verdict, without)
        stalled = [(m, sum(learned_runs[(m, k)] for k in seeds), len(seeds)) for m in ("dream", other)
                   if all((m, k) in learned_runs for k in seeds)]  # fmt: skip
        stalled = [(m, r, n) for m, r, n in stalled if r < n]
        if stalled:
            measured += "; " + "; ".join(f"{m} learned in {r} of {n} seed(s)" for m, r, n in stalled)
            verdict += f" — but {' and '.join(m for m, _, _ in stalled)} did not learn in every seed"
        verdict += _tuning_caveat(searched, other)
        rows.append({"claim": claim, "measured": measured, "verdict": verdict + robustness})

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

    def learned_in(row: str, seeds: set[int]) -> int | None:
        """In how many of ``seeds`` ``row`` learned; None where that is not known for every seed."""
        if not all((row, k) in learned_runs for k in seeds):
            return None
        return sum(learned_runs[(row, k)] for k in seeds)

    def matched(rows: list[str], datasets: list[str]) -> tuple[set[int], str]:
        """The seeds every row ran on every dataset, and a note of how many of them each row learned in
        (where known)."""
        seeds = set.intersection(*(complete_seeds(r, datasets) for r in rows)) if rows else set()
        learned = [(r, n) for r in rows if (n := learned_in(r, seeds)) is not None]
        note = (
            "; learned in: " + ", ".join(f"{r} {n} of {len(seeds)}" for r, n in learned)
            if seeds and learned
            else ""
        )
        return seeds, note

    def learning_caveat(winner: str | None, others: list[str], seeds: set[int]) -> str:
        """A favoured row that did not learn in every seed undermines the verdict ("but ..."); another row
        that did not learn is stated plainly (for an ablation expected to fail, that is the mechanism). A row
        whose learning is not known for every seed gets no caveat; ``winner`` None: no row is favoured."""
        n = learned_in(winner, seeds) if winner is not None else None
        caveat = f" — but {winner} did not learn in every seed" if n is not None and n < len(seeds) else ""
        for row in others:
            n = learned_in(row, seeds)
            if n is not None and n < len(seeds):
                caveat += f"; {row} did not learn in " + ("any seed" if n == 0 else f"{len(seeds) - n} of {len(seeds)} seeds")
        return caveat

    @functools.cache  # a verdict, its leave-one-out recomputations and the measured cell share each test
    def tested(
        ours: str, theirs: str, datasets: tuple[str, ...], kept: frozenset[int]
    ) -> tuple[float, float] | None:
        """(difference, p) of ``ours`` against ``theirs`` on ``datasets`` at seeds ``kept`` by the paired
        test; None where either row lacks per-query scores for one of them."""
        if per_query is None or not kept:
            return None
        pairs = []
        for dataset in datasets:
            a, b = per_query.get((ours, dataset)), per_query.get((theirs, dataset))
            if a is None or b is None or not kept <= set(a.columns) & set(b.columns):
                return None
            pairs.append((a[sorted(kept)].mean(axis=1), b[sorted(kept)].mean(axis=1)))
        return set_balanced_test(pairs)

    dream = frame[(frame.method == "dream") & (frame.experiment == "default")]
    fallback_heads, fallback_k = defaults or (16, 16)  # before DREAM's default row exists: the profile's values
    heads = int(dream.params.iloc[0].get("num_heads", 16)) if not dream.empty else fallback_heads
    k = (
        int(dream.num_candidates.iloc[0])
        if not dream.empty and pd.notna(dream.num_candidates.iloc[0])
        else fallback_k
    )

    def head_row(n: int) -> str:
        return "dream" if n == heads else f"dream/heads-top{n}"

    def k_row(n: int) -> str:
        return "dream" if n == k else f"dream/candidates-{n}"

    # Fig. 6: more candidates beat fewer (16 beat 4 in the paper): the largest and smallest K the plan runs
    ks = sorted({k, *(n for n in PAPER_CANDIDATE_COUNTS if planned is not None and k_row(n) in planned)})
    more, fewer = (ks[-1], ks[0]) if planned is not None and len(ks) > 1 else (16, 4)
    k_claim = f"{more} candidates beat {fewer} (Fig. 6{': 16 beat 4' if (more, fewer) != (16, 4) else ''})"

    ablation_claims = (
        ("QRHead heads beat random heads (Fig. 2)", "dream", "dream/heads-random", "ablation-head-selection"),
        ("QRHead heads beat random middle-layer heads (Fig. 2)", "dream", "dream/heads-random-middle",
         "ablation-head-selection"),
        (k_claim, k_row(more), k_row(fewer), "ablation-candidates"),
        ("a frozen judge is at least as good as a LoRA-trained one (Fig. 5)", "dream", "dream/judge-lora",
         "ablation-judge"),
    )  # fmt: skip
    for claim, ours, theirs, group in ablation_claims:
        datasets = sorted(set(scores[scores.group == group].dataset))
        seeds, note = matched([ours, theirs], datasets)
        if not seeds:
            rows.append({"claim": claim, "measured": absent(ours, theirs), "verdict": "–"})
            continue

        def pair_verdict(kept: set[int], ours=ours, theirs=theirs, datasets=datasets, claim=claim) -> str:
            test = tested(ours, theirs, tuple(datasets), frozenset(kept))
            if test is not None:
                difference, p = test
                return NO_DIFFERENCE if p >= ALPHA else "holds" if difference > 0 else "does not hold"
            a, b = mean_over(ours, datasets, kept), mean_over(theirs, datasets, kept)
            return "holds" if (a >= b if "at least" in claim else a > b) else "does not hold"

        a, b = mean_over(ours, datasets, seeds), mean_over(theirs, datasets, seeds)
        verdict = pair_verdict(seeds)
        test = tested(ours, theirs, tuple(datasets), frozenset(seeds))
        if verdict == NO_DIFFERENCE:
            caveat = learning_caveat(None, [ours, theirs], seeds)
        else:
            winner, loser = (ours, theirs) if verdict == "holds" else (theirs, ours)
            caveat = learning_caveat(winner, [loser], seeds)
        robustness = _robustness(seeds, verdict, lambda s, seeds=seeds, f=pair_verdict: f(seeds - {s}))
        p_note = f"; paired test p = {test[1]:.3g}" if test is not None else "; no per-query scores: means only"
        rows.append({"claim": claim, "measured": f"{a:.4f} vs {b:.4f} (mean NDCG@10 over {len(datasets)} sets and "
                                                 f"{_seeds_label(seeds)}){p_note}{note}",
                     "verdict": f"{verdict} ({_seeds_count(seeds)}{_indicative(seeds)}){caveat}{robustness}"})  # fmt: skip
    datasets = sorted(set(scores[scores.group == "ablation-head-count"].dataset))
    claim = "16 heads is the best head count (Fig. 3)"
    # progressive: the head counts run so far (at seeds the default also ran); a count that beats 16 already
    # decides the claim, while 16 ahead of the others decides it only once every count has run
    counts_planned = [n for n in PAPER_HEAD_COUNTS if planned is None or head_row(n) in planned]
    ran = [n for n in counts_planned if complete_seeds(head_row(n), datasets)]
    decidable = 16 in ran and len(ran) > 1
    seeds, note = matched([head_row(n) for n in ran], datasets) if decidable else (set(), "")
    if seeds:
        counts = {n: mean_over(head_row(n), datasets, seeds) for n in ran}
        left = [n for n in counts_planned if n not in ran]
        pending = f"; top {', '.join(map(str, left))} not run yet" if left else ""

        def count_tests(kept: set[int]) -> dict[int, tuple[float, float]] | None:
            """Per other count, (16's difference against it, Bonferroni-corrected p); None: means only."""
            tests = {
                n: tested(head_row(16), head_row(n), tuple(datasets), frozenset(kept)) for n in ran if n != 16
            }
            if any(t is None for t in tests.values()):
                return None
            return {n: (d, min(1.0, p * len(tests))) for n, (d, p) in tests.items()}  # type: ignore[misc]

        def count_verdict(kept: set[int]) -> str:
            tests = count_tests(kept)
            if tests is None:
                means = {n: mean_over(head_row(n), datasets, kept) for n in ran}
                best = max(means, key=means.get)
                return "does not hold" if best != 16 else "–" if left else "holds"
            if any(d < 0 and p < ALPHA for d, p in tests.values()):
                return "does not hold"
            if left:
                return "–"
            return "holds" if all(d > 0 and p < ALPHA for d, p in tests.values()) else NO_DIFFERENCE

        base = count_verdict(seeds)
        robustness = _robustness(seeds, base, lambda s: count_verdict(seeds - {s}))
        tests = count_tests(seeds)
        if base == "does not hold":
            ahead = [n for n, (d, p) in (tests or {}).items() if d < 0 and p < ALPHA] or list(counts)
            best: int | None = max(ahead, key=counts.get)
        else:
            best = 16 if base != NO_DIFFERENCE else None
        caveat = learning_caveat(None if best is None else head_row(best),
                                 [head_row(n) for n in ran if n != best], seeds)  # fmt: skip
        among = "" if counts_planned == list(PAPER_HEAD_COUNTS) else f"among top {', '.join(map(str, ran))}; "
        label = f"({among}{_seeds_count(seeds)}{_indicative(seeds)})"
        verdict = (f"– (16 best so far; {_seeds_count(seeds)}{_indicative(seeds)})" if base == "–"
                   else f"{base} {label}{caveat}") + robustness  # fmt: skip
        p_note = (
            "; paired tests against top 16 (Bonferroni): " + ", ".join(f"top {n} p = {p:.3g}" for n, (_, p) in tests.items())
            if tests is not None
            else "; no per-query scores: means only"
        )
        measured = (
            ", ".join(f"top {n} {v:.4f}" for n, v in counts.items())
            + f" ({_seeds_label(seeds)}){p_note}{note}{pending}"
        )
        rows.append({"claim": claim, "measured": measured, "verdict": verdict})
    else:
        measured = "not run yet" if planned is None or len(counts_planned) > 1 else NOT_PLANNED
        rows.append({"claim": claim, "measured": measured, "verdict": "–"})
    return pd.DataFrame(rows).set_index("claim")


def planned_rows(profile: str) -> set[str] | None:
    """The rows the profile's plan runs (None for a profile not registered: every row counts as planned)."""
    if profile not in PROFILES:
        return None
    return {row_label(e.method, e.name) for e in PROFILES.get(profile).experiments}


def dream_defaults(profile: str) -> tuple[int, int] | None:
    """The profile's DREAM head count and K (None for a profile not registered)."""
    if profile not in PROFILES:
        return None
    config = PROFILES.get(profile).config
    return method_params(METHODS.get("dream").Params, config, "dream").num_heads, config.data.num_candidates
