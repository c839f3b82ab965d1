"""The evaluation-task registry: one declarative :class:`TaskSpec` per dataset, and loading in BEIR format.

A task is found in ``<data-dir>/<name>/`` (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) and read
through the ``beir`` package's loader. When it is missing: online, BEIR tasks are downloaded by name and
RTEB/MTEB tasks are exported from ``mteb`` into the same layout; offline, the task is skipped with one line
saying where it was looked for. Built tasks (the Wikipedia description→lead set) are written by the suite.
``nano-*`` tasks ship inside the package (``dreambench/datasets/``, made by ``python -m dreambench.cli.nano``): query
samples of the full collections with BM25 hard distractors, as NanoBEIR builds them; reports label them.
Any other folder ``<data-dir>/<name>/`` in BEIR layout is a task by its folder name (suite ``user``).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig, fingerprint
from .data.beir import DatasetFormatError, RetrievalData, read_beir_folder
from .data.desc2lead import build_desc2lead
from .data.nano import RECIPES, SHIPPED_DIR, shipped_facts
from .registry import Registry, UnknownNameError
from .workspace import Workspace, atomic_dir, internet_available

log = logging.getLogger(__name__)

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


class DatasetUnavailable(RuntimeError):
    """A dataset that is neither on disk nor obtainable here; callers skip it with this one-line message."""


@dataclass(frozen=True)
class TaskSpec:
    name: str  # folder name under the data dir, and the name used on the command line
    suite: str  # BEIR | RTEB | Wikipedia
    paper_name: str | None = None  # column in the DREAM paper's tables (reference/dream_paper_ndcg10.csv)
    beir_name: str | None = None  # download name on the BEIR server
    mteb_name: str | None = None  # MTEB task name (RTEB tasks; BEIR tasks also have one)
    mteb_subset: str = "default"
    mteb_split: str | None = None  # defaults to ``split``
    split: str = "test"
    forums: tuple[str, ...] = ()  # CQADupStack: evaluated per forum, averaged
    builder: str | None = None  # built by the suite (see BUILDERS)
    base: str | None = None  # nano tasks: the full task they were sampled from
    shipped: bool = False  # files ship inside the package (dreambench/datasets/<name>/)
    description: str = ""

    @property
    def is_nano(self) -> bool:
        return self.shipped and self.base is not None


TASKS: Registry[TaskSpec] = Registry("dataset")
# name → function(workspace, run_config) → folder holding the BEIR files of a built dataset
BUILDERS: dict[str, Callable[[Workspace, RunConfig], Path]] = {"wiki-desc2lead": build_desc2lead}


def _add(spec: TaskSpec) -> None:
    TASKS.add(spec.name, spec)


CQADUPSTACK_FORUMS = (
    "android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats", "tex",
    "unix", "webmasters", "wordpress",
)  # fmt: skip

for _name, _paper, _mteb in [
    ("arguana", "ArguAna", "ArguAna"),
    ("nfcorpus", "NFCorpus", "NFCorpus"),
    ("fiqa", "FiQA", "FiQA2018"),
    ("scifact", "SciFact", "SciFact"),
    ("scidocs", "SCIDOCS", "SCIDOCS"),
    ("quora", "Quora", "QuoraRetrieval"),
    ("trec-covid", "TREC-COVID", "TRECCOVID"),
    ("webis-touche2020", "Touche", "Touche2020"),
]:
    _add(TaskSpec(_name, "BEIR", paper_name=_paper, beir_name=_name, mteb_name=_mteb))
_add(
    TaskSpec(
        "cqadupstack", "BEIR", paper_name="CQADupStack", beir_name="cqadupstack", forums=CQADUPSTACK_FORUMS,
        description="12 StackExchange forums, NDCG@10 averaged over forums",
    )
)  # fmt: skip
for _name, _paper, _mteb, _subset, _split in [
    ("aila-casedocs", "AILA-C", "AILACasedocs", "default", None),
    ("aila-statutes", "AILA-S", "AILAStatutes", "default", None),
    ("legalsummarization", "LegalSum", "LegalSummarization", "default", None),
    ("financebench", "FinBench", "FinanceBenchRetrieval", "default", None),
    ("hc3finance", "HC3Fin", "HC3FinanceRetrieval", "default", None),
    ("finqa", "FinQA", "FinQARetrieval", "default", None),
    ("apps", "Apps", "AppsRetrieval", "default", None),
    ("ds1000", "DS1000", "DS1000Retrieval", "default", None),
    ("humaneval", "HumanEval", "HumanEvalRetrieval", "default", None),
    ("mbpp", "MBPP", "MBPPRetrieval", "default", None),
    ("wikisql", "WikiSQL", "WikiSQLRetrieval", "default", None),
    ("freshstack", "FreshStack", "FreshStackRetrieval", "default", None),
    ("chatdoctor", "ChatDoctor", "ChatDoctorRetrieval", "default", None),
    ("curev1", "CUREv1", "CUREv1", "en", "all"),
]:
    _add(TaskSpec(_name, "RTEB", paper_name=_paper, mteb_name=_mteb, mteb_subset=_subset, mteb_split=_split))
_add(
    TaskSpec(
        "wiki-desc2lead", "Wikipedia", builder="wiki-desc2lead",
        description="held-out Wikipedia articles: short description → lead paragraph (offline, built by the suite)",
    )
)  # fmt: skip


def _add_shipped() -> None:
    for name, recipe in RECIPES.items():
        base, facts = TASKS.get(recipe.base), shipped_facts(name)
        how = f"{facts['queries']} queries, {facts['docs']} docs"
        how += (
            f" (judged + BM25 top-{recipe.bm25_depth} per query)"
            if recipe.bm25_depth
            else " (whole collection)"
        )
        _add(
            TaskSpec(name, base.suite, paper_name=base.paper_name, base=recipe.base, shipped=True,
                     description=f"nano {recipe.base}, ships with dreambench: {how}")
        )  # fmt: skip


_add_shipped()


def user_folders(data_dir: Path) -> list[str]:
    """Folder names under ``data_dir`` in BEIR layout that are not registered tasks."""
    if not data_dir.is_dir():
        return []
    folders = [p.name for p in data_dir.iterdir() if (p / "corpus.jsonl").is_file()]
    return sorted(name for name in folders if canonical_dataset(name) not in TASKS)


def canonical_dataset(name: str) -> str:
    """The suite's name for ``name``: the registered task whose name, MTEB task name or paper name it is, case
    aside (``SciFact``, ``SCIFACT`` → ``scifact``; ``FiQA2018`` → ``fiqa``; ``NanoSciFact`` → ``nano-scifact``);
    else ``name`` unchanged (a BEIR folder of the user's own in ``data_dir``, or unknown: ``task_spec`` says)."""
    if name in TASKS:
        return name
    key = name.lower().replace("_", "-")
    for known in TASKS.names():
        spec = TASKS.get(known)
        if known.startswith("nano-") and known[5:] in TASKS:  # NanoBEIR spells them NanoSciFact
            base = TASKS.get(known[5:])
            aliases = {known} | {f"nano{a}" for a in (base.mteb_name, base.paper_name, known[5:]) if a}
        else:
            aliases = {known} | {a for a in (spec.mteb_name, spec.paper_name) if a}
        lowered = {a.lower() for a in aliases}
        if key in lowered or key.replace("-", "") in lowered:
            return known
    return name  # a folder of the user's own, or unknown (task_spec says so)


def task_spec(name: str, data_dir: Path | None = None) -> TaskSpec:
    """The registered task ``name``, else a user's BEIR folder ``<data_dir>/<name>/`` (suite ``user``)."""
    if name in TASKS or data_dir is None:
        return TASKS.get(name)
    folder = data_dir / name
    if (folder / "corpus.jsonl").is_file():
        return TaskSpec(name, "user", description=f"BEIR-format folder {folder}")
    try:
        return TASKS.get(name)
    except UnknownNameError as exc:
        raise UnknownNameError(
            f"{exc}; a dataset of your own is used by its folder name: {folder}/ with corpus.jsonl, "
            "queries.jsonl and qrels/test.tsv"
        ) from None


# ----------------------------------------------------------------------------------------------------------
# validation: locate the first malformed line of a BEIR file


# ----------------------------------------------------------------------------------------------------------
# obtaining a task


def _download_beir(spec: TaskSpec, data_dir: Path) -> Path:
    from beir import util

    target = data_dir / spec.name
    log.info("downloading BEIR dataset %s into %s", spec.beir_name, data_dir)
    with atomic_dir(target) as tmp:
        util.download_and_unzip(BEIR_URL.format(name=spec.beir_name), str(tmp))
        inner = tmp / spec.beir_name
        for item in inner.iterdir():
            item.rename(tmp / item.name)
        inner.rmdir()
    return target


def export_mteb_split(split_data: Any, folder: Path, split: str) -> None:
    """Write an mteb retrieval split (``corpus``/``queries`` datasets, ``relevant_docs`` dict) as BEIR files."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for row in split_data["corpus"]:
            doc = {"_id": str(row["id"]), "title": row.get("title") or "", "text": row.get("text") or ""}
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for row in split_data["queries"]:
            handle.write(json.dumps({"_id": str(row["id"]), "text": row["text"]}, ensure_ascii=False) + "\n")
    with (folder / "qrels" / f"{split}.tsv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["query-id", "corpus-id", "score"])
        for qid, docs in split_data["relevant_docs"].items():
            for did, rel in docs.items():
                writer.writerow([qid, did, int(rel)])


def _download_mteb(spec: TaskSpec, data_dir: Path) -> Path:
    import mteb

    task = mteb.get_task(spec.mteb_name)
    log.info("loading MTEB task %s (%s) into %s", spec.mteb_name, task.metadata.dataset["path"], data_dir)
    task.load_data()
    task.convert_v1_dataset_format_to_v2()
    split = spec.mteb_split or spec.split
    target = data_dir / spec.name
    with atomic_dir(target) as tmp:
        export_mteb_split(task.dataset[spec.mteb_subset][split], tmp, spec.split)
    return target


def locate(spec: TaskSpec, workspace: Workspace) -> Path | None:
    """The task's BEIR folder on disk: shipped, or in the data folder under its name, its MTEB task name or its
    paper name (``scifact/``, ``SciFact/``); None when none holds a corpus."""
    if spec.shipped:
        return SHIPPED_DIR / spec.name
    for name in dict.fromkeys(n for n in (spec.name, spec.mteb_name, spec.paper_name) if n):
        folder = workspace.data_dir / name
        if (folder / "corpus.jsonl").is_file():
            return folder
    return None


def load_task(name: str, workspace: Workspace, config: RunConfig | None = None) -> RetrievalData:
    """Load a registered task; raise DatasetUnavailable (skip) or DatasetFormatError (fix the file)."""
    spec = task_spec(name, workspace.data_dir)
    config = config or RunConfig()
    split = config.eval.split if config.eval.split else spec.split
    if spec.shipped:
        data = read_beir_folder(SHIPPED_DIR / spec.name, "test", spec.name)
        data.subsample = shipped_facts(spec.name)
        return data
    if spec.builder is not None:
        folder = BUILDERS[spec.builder](workspace, config)
        return read_beir_folder(folder, "test", spec.name)
    if spec.forums:
        parts = [read_beir_folder(f, split, f"{spec.name}/{f.name}") for f in _forum_folders(spec, workspace)]
        merged = RetrievalData(
            name=spec.name,
            corpus={},
            queries={},
            qrels={},
            source=str(workspace.data_dir / spec.name),
            parts=parts,
        )
        return merged
    folder = locate(spec, workspace)
    if folder is None:
        folder = _fetch(spec, workspace)
    return read_beir_folder(folder, split, spec.name)


def _forum_folders(spec: TaskSpec, workspace: Workspace) -> list[Path]:
    root = workspace.data_dir / spec.name
    if not root.is_dir():
        root = _fetch(spec, workspace)
    folders = [root / forum for forum in spec.forums]
    missing = [f for f in folders if not (f / "corpus.jsonl").is_file()]
    if missing:
        raise DatasetFormatError(
            f"{spec.name}: forum folders missing under {root}: {[f.name for f in missing]}"
        )
    return folders


def _fetch(spec: TaskSpec, workspace: Workspace) -> Path:
    where = workspace.data_dir / spec.name
    if not internet_available():
        raise DatasetUnavailable(
            f"skipping {spec.name}: not found at {where} (data dir from --data-dir, $DREAMBENCH_DATA or ./data) "
            "and offline, so not downloaded"
        )
    try:
        if spec.beir_name:
            return _download_beir(spec, workspace.data_dir)
        if spec.mteb_name:
            return _download_mteb(spec, workspace.data_dir)
    except Exception as exc:  # network or hub failures: report and skip, never leave a partial folder
        raise DatasetUnavailable(
            f"skipping {spec.name}: not found at {where} and the download failed: {exc}"
        ) from exc
    raise DatasetUnavailable(f"skipping {spec.name}: not found at {where} and it has no download source")


def task_fingerprint(spec: TaskSpec, config: RunConfig) -> str:
    """What a task's content depends on beyond its files (built tasks: their build options)."""
    parts: list[Any] = [spec]
    if spec.builder is not None:
        parts.append(
            {k: getattr(config.data, k) for k in ("source", "eval_articles", "eval_queries", "seed")}
        )
    return fingerprint(*parts)
