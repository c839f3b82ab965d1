"""PromptReps (Zhuang et al., 2024; as described in DiffRetriever §3 and Table 1): zero-shot dense, sparse and
hybrid retrieval from one prompted forward pass of an instruction-tuned LLM, no training.

Each query or passage is wrapped in a chat prompt that asks for one lowercase word to represent it, and the
assistant turn is opened with ``The word is "``. At the last prompt position (where the word would be
generated) the final hidden state, L2-normalised, is the **dense** representation, and the next-token logits,
``log(1 + ReLU(logit))``, give the **sparse** one: only the vocabulary entries of the text's own words count
(lower-cased words minus English stop words and punctuation, each word tokenised on its own, as the released
code does), at most ``max_terms`` of them, quantised to integers (× ``quantization``) as term impacts. The
sparse side is searched through a real inverted index (Anserini's impact index through pyserini), the dense
side by exact inner product. **Hybrid**: each run's scores min-max normalised per query over its top
``hybrid_depth`` list, then ``alpha · dense + (1 − alpha) · sparse`` (a document missing from one list gets 0
there), as the released code fuses them.

``scoring`` picks the row: ``hybrid`` (the paper's zero-shot headline), ``dense`` or ``sparse``. The LLM is
the profile's retriever backbone (``model.backbone``) with its LM head, unpruned; a backbone without a chat
template gets the same messages as plain text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from dreambench.data.beir import RetrievalData
from dreambench.evaluation.metrics import Run
from dreambench.evaluation.search import dense_search
from dreambench.lucene import index_collection, lucene_impact_searcher_class
from dreambench.method import DenseMethod, passage_text, register_method
from dreambench.models.backbones import (
    autocast_dtype,
    default_device,
    load_model,
    load_tokenizer,
    store_frozen_linears,
)
from dreambench.models.prompts import ANSWER, SYSTEM, USER, one_word_prompt
from dreambench.models.retriever import EncodeStats
from dreambench.workspace import atomic_dir, atomic_path, build_lock

log = logging.getLogger(__name__)

SCORINGS = ("hybrid", "dense", "sparse")


@dataclass(frozen=True)
class PromptRepsParams:
    scoring: str = "hybrid"  # hybrid | dense | sparse
    alpha: float = 0.5  # hybrid weight of the dense run (the released code: 0.5)
    max_terms: int = 128  # the text's words kept in its sparse vector, by weight (the released code: 128)
    quantization: int = 100  # integer impacts: round(weight × this) (the released code: 100)
    hybrid_depth: int = 1000  # each run's list that min-max normalisation and fusion see (DiffRetriever §3.3)
    batch_size: int = 8


def stop_words() -> frozenset[str]:
    """NLTK's English stop words (the list ``bm25s`` ships) and ASCII punctuation, as the released code drops."""
    from bm25s.stopwords import STOPWORDS_EN_PLUS

    return frozenset(STOPWORDS_EN_PLUS) | frozenset(string.punctuation)


_WORD = re.compile(r"\w+|[^\w\s]")


def content_token_ids(text: str, tokenizer, stops: frozenset[str]) -> list[int]:
    """The vocabulary ids a text's sparse vector may use: each lower-cased word that is not a stop word or
    punctuation, tokenised on its own (without special tokens), in first-seen order."""
    ids: dict[int, None] = {}
    for word in _WORD.findall(text.lower()):
        if word not in stops:
            ids.update(dict.fromkeys(tokenizer.encode(word, add_special_tokens=False)))
    return list(ids)


def sparse_vector(weights: torch.Tensor, allowed: list[int], max_terms: int, quantization: int) -> dict[str, int]:
    """Term impacts from one next-token weight vector (``log(1 + ReLU(logits))``, shape (V,)): the ``max_terms``
    heaviest of the ``allowed`` ids (all ids when none is allowed: the ten heaviest), as ``{str(id): impact}``
    with ``impact = round(weight × quantization)``, zeros dropped."""
    if allowed:
        ids = torch.tensor(allowed, dtype=torch.long)
        values, order = weights[ids].topk(min(max_terms, len(allowed)))
        ids = ids[order]
    else:
        values, ids = weights.topk(min(10, weights.numel()))
    impacts = torch.round(values.float() * quantization).long()
    return {str(int(i)): int(v) for i, v in zip(ids, impacts, strict=True) if v > 0}


def min_max_fuse(first: Run, second: Run, alpha: float) -> Run:
    """``alpha · first + (1 − alpha) · second`` after min-max normalising each run per query (a document absent
    from one run scores 0 there; a run whose scores are all equal normalises to 1)."""

    def normalised(run: dict[str, float]) -> dict[str, float]:
        if not run:
            return {}
        low, high = min(run.values()), max(run.values())
        return {d: (s - low) / (high - low) if high > low else 1.0 for d, s in run.items()}

    fused: Run = {}
    for qid in dict.fromkeys([*first, *second]):
        a, b = normalised(first.get(qid, {})), normalised(second.get(qid, {}))
        fused[qid] = {d: alpha * a.get(d, 0.0) + (1 - alpha) * b.get(d, 0.0) for d in dict.fromkeys([*a, *b])}
    return fused


class _Precomputed:
    """A pyserini query encoder that returns each query's precomputed impacts (the query text is its id)."""

    def __init__(self, vectors: dict[str, dict[str, int]]):
        self.vectors = vectors

    def encode(self, query: str) -> dict[str, int]:
        return self.vectors[query]


@register_method("promptreps")
class PromptReps(DenseMethod):
    description = "zero-shot: one-word prompt, last-position hidden state (dense) and logits (sparse), hybrid"
    Params = PromptRepsParams
    main_table = True
    run_order = 1
    row_order = 1
    main_variants = (("dense", {"methods.promptreps.scoring": "dense"}),
                     ("sparse", {"methods.promptreps.scoring": "sparse"}))  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if p.scoring not in SCORINGS:
            raise ValueError(f"methods.promptreps.scoring = {p.scoring!r} (hybrid, dense or sparse)")
        if not 0.0 <= p.alpha <= 1.0:
            raise ValueError(f"methods.promptreps.alpha = {p.alpha} (must be in [0, 1])")
        for name in ("max_terms", "quantization", "hybrid_depth", "batch_size"):
            if getattr(p, name) < 1:
                raise ValueError(f"methods.promptreps.{name} = {getattr(p, name)} (must be ≥ 1)")
        self.model = self.tokenizer = None
        self.stops = stop_words()
        self.encoded_tokens = 0
        self._prompts: dict[str, tuple[list[int], list[int]]] = {}  # prompt_parts per kind, once tokenised
        self.stats: dict[str, EncodeStats] = {}

    def result_dependencies(self) -> dict[str, Any]:
        """A dense method's (model, search backend, evaluation lengths), and the prompt."""
        return {**super().result_dependencies(), "prompt": [SYSTEM, USER, ANSWER]}

    def encoding_stats(self) -> dict[str, EncodeStats]:
        return dict(self.stats)

    def encoder_identity(self) -> list[Any]:
        """What the representations depend on besides the texts and prompts (the encodings cache's key)."""
        return [self.result_dependencies()["model"]]

    def prepare(self) -> None:
        name = self.config.model.backbone
        self.tokenizer = load_tokenizer(name, self.workspace)
        self.model = load_model(name, self.workspace, causal_lm=True).to(default_device()).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        # the weights stored once in the autocast dtype instead of cast on every call (bit-identical results)
        store_frozen_linears(self.model, autocast_dtype(self.config.model.precision, default_device()))

    def close(self) -> None:
        self.model = None

    # ---- encoding --------------------------------------------------------------------------------------
    def prompt_parts(self, kind: str) -> tuple[list[int], list[int]]:
        """The token ids before and after a text of ``kind`` in the prompt (ending in ``The word is "``)."""
        return one_word_prompt(self.tokenizer, kind)

    def prompt_ids(self, text_ids: list[int], kind: str) -> list[int]:
        """The prompt around a text's (already truncated) token ids; its parts are built once per kind."""
        if kind not in self._prompts:
            self._prompts[kind] = self.prompt_parts(kind)
        before, after = self._prompts[kind]
        return before + text_ids + after

    def length_cap(self, kind: str) -> int:
        ev = self.config.eval
        cap = ev.max_query_tokens if kind == "query" else ev.max_passage_tokens
        return cap or getattr(self.config.model, f"max_{kind}_tokens")

    def encode(self, texts: list[str], kind: str) -> tuple[torch.Tensor, list[dict[str, int]]]:
        """Dense (N, D) L2-normalised embeddings and sparse impact vectors for ``texts``, cached on disk by
        everything they depend on (model, prompt, length cap, sparse settings, the texts), so that the dense,
        sparse and hybrid rows share one encoding pass."""
        p, cap = self.params, self.length_cap(kind)
        tok = self.tokenizer
        stats = self.stats[kind] = EncodeStats(texts=len(texts), max_tokens=cap)
        rows = []
        for text in texts:  # the text cut to the cap, then wrapped in the prompt (as the released code does)
            ids = tok.encode(text, add_special_tokens=False)
            stats.truncated += len(ids) > cap
            rows.append(self.prompt_ids(ids[:cap], kind))
        stats.tokens = sum(len(r) for r in rows)
        key = json.dumps(
            [*self.encoder_identity(), SYSTEM, USER, ANSWER, p.max_terms, p.quantization, texts, rows],
            sort_keys=True,
        )
        digest = hashlib.sha1(key.encode()).hexdigest()[:20]
        target = self.workspace.cache("encodings", "promptreps") / f"{kind}-{digest}.pt"
        if target.is_file():
            try:
                cached = torch.load(target, weights_only=True)
                log.info("reusing PromptReps %s encodings %s", kind, target)
                return cached["dense"], cached["sparse"]
            except Exception as exc:  # noqa: BLE001 (a damaged file: encode again)
                log.warning("PromptReps encodings %s unreadable (%s); encoding again", target, exc)
        start = time.perf_counter()
        dense, sparse = self._encode(texts, rows)
        stats.seconds = time.perf_counter() - start
        with atomic_path(target) as tmp:
            torch.save({"dense": dense, "sparse": sparse}, tmp)
        return dense, sparse

    @torch.inference_mode()
    def _encode(self, texts: list[str], rows: list[list[int]]) -> tuple[torch.Tensor, list[dict[str, int]]]:
        """One forward pass per batch of prompts (``rows``, token ids); the representations of ``texts``."""
        tok, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        dtype = autocast_dtype(self.config.model.precision, device)
        dense = torch.empty((len(texts), model.config.hidden_size))
        sparse: list[dict[str, int]] = [{} for _ in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(rows[i]))
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        size = self.params.batch_size
        bar = tqdm(total=len(texts), desc="promptreps encode", unit="text", leave=False)
        for start in range(0, len(order), size):
            index = order[start : start + size]
            width = max(len(rows[i]) for i in index)
            ids = torch.full((len(index), width), pad, dtype=torch.long)
            mask = torch.zeros((len(index), width), dtype=torch.long)
            for r, i in enumerate(index):  # left padding: every row's last position is its word position
                ids[r, width - len(rows[i]) :] = torch.tensor(rows[i])
                mask[r, width - len(rows[i]) :] = 1
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                out = model.model(input_ids=ids.to(device), attention_mask=mask.to(device))
                last = out.last_hidden_state[:, -1]  # (B, D), after the final norm
                logits = model.lm_head(last)  # (B, V): the next-token logits at the word position
            weights = torch.log1p(torch.relu(logits.float())).cpu()
            dense[index] = torch.nn.functional.normalize(last.float(), dim=-1).cpu()
            for r, i in enumerate(index):
                allowed = content_token_ids(texts[i], tok, self.stops)
                sparse[i] = sparse_vector(weights[r], allowed, self.params.max_terms, self.params.quantization)
            self.encoded_tokens += int(mask.sum())
            bar.update(len(index))
        bar.close()
        return dense, sparse

    # ---- retrieval -------------------------------------------------------------------------------------
    def retrieve(self, data: RetrievalData, depth: int) -> Run:
        qids, dids = list(data.queries), list(data.corpus)
        with self.timed("encode_queries_s"):
            q_dense, q_sparse = self.encode([data.queries[i] for i in qids], "query")
        with self.timed("encode_corpus_s"):
            d_dense, d_sparse = self.encode([passage_text(data.corpus[i]) for i in dids], "passage")
        self.timings["encode_tokens_per_s"] = self.stats["passage"].tokens_per_second
        q_one, d_one = self.single_vector(q_dense), self.single_vector(d_dense)
        self._last_embeddings = (data.name, qids, q_one, dids, d_one)  # the dense side's geometry
        scoring, pool = self.params.scoring, max(depth, self.params.hybrid_depth)
        with self.timed("search_s"):
            dense = sparse = {}
            if scoring in ("dense", "hybrid"):
                backend = self.config.eval.search_backend
                dense = self.dense_run(q_dense, d_dense, qids, dids, min(pool, len(dids)), backend)
            if scoring in ("sparse", "hybrid"):
                sparse = self.sparse_search(data, dids, d_sparse, dict(zip(qids, q_sparse, strict=True)), pool)
            run = min_max_fuse(dense, sparse, self.params.alpha) if scoring == "hybrid" else dense or sparse
        return {qid: dict(sorted(hits.items(), key=lambda kv: -kv[1])[:depth]) for qid, hits in run.items()}

    @staticmethod
    def single_vector(dense: torch.Tensor) -> torch.Tensor:
        """One normalised vector per text (the geometry's input): the representation, or the mean of several."""
        return dense if dense.dim() == 2 else torch.nn.functional.normalize(dense.mean(dim=1), dim=-1)

    def dense_run(self, q: torch.Tensor, d: torch.Tensor, qids, dids, depth: int, backend: str) -> Run:
        """Exact inner-product search of single vectors."""
        return dense_search(q, d, qids, dids, depth, backend)

    def sparse_search(
        self,
        data: RetrievalData,
        dids: list[str],
        vectors: list[dict[str, int]],
        queries: dict[str, dict[str, int]],
        depth: int,
    ) -> Run:
        """The impact index of the passages' vectors (cached by their content), searched with the queries'."""
        digest = json.dumps([*self.encoder_identity(), dids, vectors], sort_keys=True)
        key = f"{data.name.replace('/', '--')}-{hashlib.sha1(digest.encode()).hexdigest()[:16]}"
        index_dir = self.workspace.cache("indexes", "promptreps") / key
        with build_lock(index_dir, f"the PromptReps impact index of {data.name}"):
            if not index_dir.is_dir():
                self._build_index(index_dir, dids, vectors)
        searcher = lucene_impact_searcher_class()(str(index_dir), _Precomputed(queries))
        try:
            asked = [q for q in queries if queries[q]]  # a query with no term cannot be searched
            hits = searcher.batch_search(asked, asked, k=depth, threads=1) if asked else {}
            return {qid: {h.docid: float(h.score) for h in hits.get(qid, [])} for qid in queries}
        finally:
            searcher.close()

    @staticmethod
    def _build_index(index_dir: Path, dids: list[str], vectors: list[dict[str, int]]) -> None:
        with atomic_dir(index_dir) as tmp:
            collection = tmp / "collection"
            collection.mkdir()
            with (collection / "vectors.jsonl").open("w", encoding="utf-8") as handle:
                for did, vector in zip(dids, vectors, strict=True):
                    handle.write(json.dumps({"id": did, "contents": "", "vector": vector}) + "\n")
            index_collection(str(collection), str(tmp / "index"), 1, impact=True)
            (collection / "vectors.jsonl").unlink()
            collection.rmdir()
            for item in (tmp / "index").iterdir():
                item.rename(tmp / item.name)
            (tmp / "index").rmdir()

    def result_extra(self) -> dict[str, Any]:
        return {"scoring": self.params.scoring, "prompt": USER, "answer_prefix": ANSWER}
