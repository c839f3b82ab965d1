"""The rows of ``docs/fidelity.md``: every setting against the papers (rendered and checked by
:mod:`dreambench.fidelity`).

A row records the paper's value with its section ("not specified" when no paper gives one), the released
code's where it differs or fills a gap, the value each profile runs, and why a profile departs from the paper.
Changing a profile's value fails ``tests/test_fidelity.py`` until its row (and its reason) is updated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROFILE_ORDER = ("smoke", "mini", "gpu", "paper")
AS_MINI = object()  # a row's gpu value where the gpu profile runs what mini runs


@dataclass(frozen=True)
class Varies:
    """A profile's value that some methods' main experiments change: ``base`` is the profile's own value,
    ``by_method`` the methods that run another one."""

    base: Any
    by_method: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    key: str  # the dotted key, as config overrides spell it
    paper: str  # the paper's value with paper and section, or "not specified"
    smoke: Any  # the value each profile runs (a Varies where the methods' main experiments differ)
    mini: Any
    paper_profile: Any
    why: str = ""  # why a profile differs from the paper: one short sentence per profile
    code: str = ""  # the released code's value, where it differs from the paper or the paper gives none
    methods: str = ""  # shared keys: all | dense | trained | comma-separated names ("": the area's default)
    engineering: bool = False  # changes speed, memory or disk use, not what the method computes
    gpu: Any = AS_MINI  # the gpu profile's value, where it is not mini's
    gpu_why: str = ""  # why the gpu profile's value differs from the paper's, where it does

    def value(self, profile: str) -> Any:
        gpu = self.mini if self.gpu is AS_MINI else self.gpu
        return {"smoke": self.smoke, "mini": self.mini, "gpu": gpu, "paper": self.paper_profile}[profile]


TEST = "smoke: test-sized"
PRECISION = ("mini: the same numbers on every CPU (auto is bf16 autocast only where the CPU has native bf16, "
             "and the two train apart by a seed's worth); ~10% slower a step there")
CPU = "mini: CPU budget"
OFFLINE = "mini: the offline model"
TUNED = "mini: the earlier search's choice, kept fixed (the current search covers the learning rate only)"
QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_LINEAR = (*QKVO, "gate_proj", "up_proj", "down_proj")
MINI_SETS = (
    "wiki-desc2lead", "nano-scifact", "nano-arguana", "nano-nfcorpus", "nano-financebench", "nano-humaneval",
    "nano-mbpp",
)  # fmt: skip
PAPER_SETS = (
    "arguana", "nfcorpus", "fiqa", "scifact", "scidocs", "quora", "trec-covid", "webis-touche2020",
    "cqadupstack",  # BEIR, then RTEB
    "aila-casedocs", "aila-statutes", "legalsummarization", "financebench", "hc3finance", "finqa", "apps",
    "ds1000", "humaneval", "mbpp", "wikisql", "freshstack", "chatdoctor", "curev1",
)  # fmt: skip

DATA = (
    Row("data.source", "DREAM §4.1, Revela §4.1: Wikipedia (Tevatron/wikipedia-nq-corpus)", "synthetic",
        "wiki-offline", "tevatron-wiki-nq", f"{TEST}; mini: Wikipedia leads shipped in a package (offline)"),
    Row("data.num_train", "DREAM §4.1: not stated (1,500 steps × 32 = 48,000); Revela §4.1: 320,000 batches",
        8, 572, 48_000, f"{TEST}; {CPU} (100 steps × 16: about 2.8 passes; with the held-out and probe sets, 800 "
        "instances)",
        gpu=1792, gpu_why="gpu: 1,952 offline leads give K = 8 chunks of 16 words (one target each): 1,792 for "
        "training and 128 for the probe; 32 unused"),
    Row("data.num_heldout", "not in the papers (tuning, the Training table)", 4, 100, 1000, TEST),
    Row("data.num_probe", "DREAM App. B: 5,000", 4, 128, 5000, f"{TEST}; {CPU}", methods="dream"),
    Row("data.num_candidates", "DREAM §4.1, §6 (Fig. 6): 16; Revela §4.1: batches of 16", 4, 8, 16,
        f"{TEST}; {CPU} (the judge reads every candidate)"),
    Row("data.candidate_sets", "DREAM §4.1: one document split into 16 chunks", "one-document", "one-document",
        "one-document", "mini, gpu: K consecutive chunks of one Wikipedia lead (see data.chunk_max_words)"),
    Row("data.chunk_max_words", "DREAM: not specified; Revela §4.1, App. B.2: 120", 16, 16, 100,
        f"{TEST}; mini, gpu: 16-word chunks, so that one Wikipedia lead gives K = 8 of them (leads are short); "
        "paper: the corpus's 100-word passages"),
    Row("data.chunk_min_words", "not specified", 3, 4, 8, f"{TEST}; mini, gpu: with 16-word chunks"),
    Row("data.query_source", "DREAM §4.1, App. A: generated from the target", "crop", "generate", "generate",
        f"{TEST} (no generator)"),
    Row("data.query_generator", "DREAM §4.1: Qwen3-14B", "tiny-llama", "gemma3-270m", "Qwen/Qwen3-14B",
        f"{TEST}; mini: the only other offline LLM (the generator is not the judge)"),
    Row("data.query_max_new_tokens", "not specified", 48, 48, 48),
    Row("data.query_batch_size", "not specified", 1, 1, 64,
        "smoke, mini: each query independent of its batch; paper: GPU throughput (not batch-invariant)",
        gpu=32, gpu_why='gpu: generation batched on the GPU (recorded in the data manifest)'),
    Row("data.query_precision", "not specified", "fp32", "fp32", "auto",
        "smoke, mini: fp32 is the faster on CPU; paper: bf16 on the GPU",
        gpu="auto", gpu_why='gpu: bf16 where the device supports it'),
    Row("data.eval_articles", "not in the papers (this suite's wiki-desc2lead set)", 24, 600, 600, TEST,
        methods="all"),
    Row("data.eval_queries", "not in the papers (this suite's wiki-desc2lead set)", 12, 300, 300, TEST,
        methods="all"),
    Row("data.seed", "not specified", 13, 13, 13, methods="all"),
)  # fmt: skip

MODEL = (
    Row("model.backbone", "DREAM §4.1: Qwen2.5-0.5B, Llama-3.2-1B, Llama-3.2-3B", "tiny-llama",
        "smollm2-135m-instruct", "qwen2.5-0.5b",
        f"{TEST}; {OFFLINE} (Revela §4.1 also reports SmolLM2-135M); paper: the other two as experiments"),
    Row("model.backbone_layers", "all layers (DREAM, Revela); Drama §3.2: a structurally pruned LLM (0.1B, 0.3B "
        "from Llama-3.2-1B)", 0, 10, 0,
        "mini: the first 10 of SmolLM2's 30 layers, a third of the cost of every retriever pass (depth pruning, "
        "without Drama's learned masks and continued pretraining), the same for every dense method",
        methods="dense", gpu=0),
    Row("model.input_template", "DREAM: not specified; Revela §4.1: the prefixes below; PromptReps: a one-word "
        "chat prompt", "prefix", "prefix", "prefix",
        "promptreps: every dense method starts from PromptReps' dense representation (measured as a lever, "
        "docs/methods.md)"),
    Row("model.query_prefix", 'Revela §4.1: "Query: "; DREAM: not specified', "Query: ", "Query: ", "Query: ",
        code='Revela: "query: " (arguments.py default)'),
    Row("model.passage_prefix", 'Revela §4.1: "Passage: "; DREAM: not specified', "Passage: ", "Passage: ",
        "Passage: ", code='Revela: "passage: " (arguments.py default)'),
    Row("model.max_query_tokens", "training queries — DREAM: not specified; Revela: no queries", 32, 64, 64,
        f"{TEST}; mini, paper: DREAM gives none (evaluation: eval.max_query_tokens)"),
    Row("model.max_passage_tokens", "training chunks — DREAM: not specified; Revela §4.1: 160", 64, 256, 512,
        f"{TEST}; {CPU} (encoding); paper: DREAM gives none (evaluation: eval.max_passage_tokens)"),
    Row("model.lora_r", "DREAM §4.1: 32; Revela §4.1: 256", 4, 32, 32,
        f"{TEST}; mini, paper: DREAM's rank for every method", methods="trained"),
    Row("model.lora_alpha", "DREAM §4.1: 64", 8, 64, 64, TEST, code="Revela: 64", methods="trained"),
    Row("model.lora_dropout", "not specified", 0.0, 0.0, 0.0, code="Revela: 0.1", methods="trained"),
    Row("model.lora_targets", "DREAM §4.1: q/k/v/o", QKVO, QKVO, QKVO, code="Revela: q/k/v/o, gate/up/down",
        methods="trained"),
    Row("model.precision", "DREAM: not specified; Revela §4.1: bf16 mixed precision", "fp32", "fp32", "auto",
        f"{TEST} (exact); {PRECISION}; paper: bf16 where supported",
        gpu="auto", gpu_why="gpu: bf16 where the device supports it"),
    Row("model.encode_batch_size", "not specified", 8, 16, 128, "throughput per machine",
        engineering=True,
        gpu=128),
)  # fmt: skip

TRAIN = (
    Row("train.steps", "DREAM §4.1: 1,500; Revela §4.1: 10,000; REPLUG (Revela App. B.3): 4,500",
        4, 100, 1500,
        f"{TEST}; {CPU} (100 × 16, 1/30 of DREAM's samples); paper: DREAM's budget for every method",
        gpu=300, gpu_why="gpu: 300 × 32 is 20% of DREAM's 1500 × 32, to fit the main table in about one GPU-hour"),
    Row("train.batch_size", "DREAM §4.1: 1; Revela §4.1: batches of 16 chunks", 1, 1, 1,
        code="Revela: 1 batch of 16 per GPU",
        gpu=8),
    Row("train.grad_accum", "DREAM §4.1: 32; Revela §4.1: 8 (on 4 GPUs)", 2, 16, 32,
        f"{TEST}; {CPU}: 16 instances a step (at 4, DREAM learned in 1 of 3 seeds); paper: DREAM's for every "
        "method",
        gpu=4, gpu_why="gpu: 8 a micro-batch × 4 = DREAM's 32 a step"),
    Row("train.lr", "DREAM §4.1, Revela §4.1: 1e-4; REPLUG (Revela App. B.3): 5e-4", 1e-4,
        Varies(3e-4, {"drama": 1e-3, "llmql": 3e-3}), 1e-4,
        "mini: each method's choice of the search (1e-4, 3e-4, 1e-3 at seeds 0 and 1, then 3e-3 and 1e-2 one at "
        "a time while a search keeps its last rate; held-out MRR, the one-standard-error rule: InfoNCE's, "
        "REPLUG's and DREAM's is 3e-4, Drama's 1e-3 over 3e-3, LLM-QL's 3e-3 over 1e-3 and 1e-2); the recipe's "
        "3e-4 for a method it has not chosen for yet; paper: DREAM's for every method",
        gpu=1e-4),
    Row("train.weight_decay", "not specified", 0.0, 0.0, 0.0),
    Row("train.warmup_steps", "DREAM: not specified; Revela §4.1: 100", 1, 10, 50,
        f"{TEST}; mini, paper: DREAM gives none (1/10 and 1/30 of the steps)",
        gpu=30, gpu_why='gpu: 10% of its 300 steps'),
    Row("train.schedule", "DREAM: not specified; Revela §4.1: WarmupDecayLR", "linear", "linear", "linear",
        "linear: warmup, then linear decay to 0"),
    Row("train.max_grad_norm", "not specified", 1.0, 1.0, 1.0),
    Row("train.precision", "DREAM: not specified; Revela §4.1: bf16 mixed precision", "fp32", "fp32", "auto",
        f"{TEST} (exact); {PRECISION}; paper: bf16 where supported",
        gpu="auto", gpu_why="gpu: bf16 where the device supports it"),
    Row("train.score_precision", "not specified (SPEC: scores in fp32)", "fp32", "fp32", "fp32"),
    Row("train.checkpoint_every", "not specified", 2, 25, 100, "how much a resumed run repeats",
        engineering=True,
        gpu=50),
    Row("train.log_every", "not specified", 1, 1, 1, engineering=True),
    Row("train.seed", "not specified", 0, 0, 0, "mini, paper: the main table also runs seeds 1 and 2"),
)  # fmt: skip

EVAL = (
    Row("eval.datasets", "DREAM §4.1, Tables 4–5: BEIR (9 tasks), RTEB (14 tasks)", ("wiki-desc2lead",),
        MINI_SETS, PAPER_SETS, f"{TEST}; {CPU}, offline: nano subsets and the wiki-desc2lead set"),
    Row("eval.split", "not specified", "test", "test", "test"),
    Row("eval.max_query_tokens", "Revela §4.1: 2,048 at inference; DREAM: not specified", 128, 2048, 2048,
        f"{TEST} (no query or passage of a shipped set is cut at 2,048: the report lists the shares)",
        methods="dense"),
    Row("eval.max_passage_tokens", "Revela §4.1: 2,048 at inference; DREAM: not specified", 128, 2048, 2048,
        TEST, methods="dense"),
    Row("eval.depth", "DREAM §4.1: NDCG@10 (needs 10)", 100, 100, 100, "100 for recall@100 too",
        engineering=True),
    Row("eval.search_backend", "not specified", "torch", "auto", "auto", "exact inner product either way",
        engineering=True),
    Row("eval.ignore_identical_ids", "not specified", True, True, True, "BEIR's and Anserini's convention"),
)  # fmt: skip

BM25 = (
    Row("methods.bm25.k1", "DREAM: not specified; DiffRetriever §4.2: Pyserini's default", 0.9, 0.9, 0.9),
    Row("methods.bm25.b", "DREAM: not specified; DiffRetriever §4.2: Pyserini's default", 0.4, 0.4, 0.4),
    Row("methods.bm25.backend", "DiffRetriever §4.2: Pyserini (Lucene)", "lucene", "lucene", "lucene"),
    Row("methods.bm25.threads", "not specified", 0, 0, 0, "0: every core", engineering=True),
)  # fmt: skip

INFONCE = (
    Row("methods.infonce.temperature", "DREAM §4.1: not specified; Revela App. C.1 (Contriever): 0.01", 0.05,
        0.05, 0.05, f"{TUNED}; smoke, paper: the same, untuned"),
)  # fmt: skip

PROMPTREPS = (
    Row("methods.promptreps.scoring", "DiffRetriever §5.2: hybrid for zero-shot (PromptReps: dense, sparse, hybrid)",
        "hybrid", "hybrid", "hybrid", "one row each for dense and sparse: --set methods.promptreps.scoring=…"),
    Row("methods.promptreps.alpha", "DiffRetriever Eq. 4: 1/2 after min-max normalisation", 0.5, 0.5, 0.5,
        code="PromptReps hybrid.py: ranx min-max wsum, alpha 0.5"),
    Row("methods.promptreps.max_terms", "not specified", 128, 128, 128,
        code="PromptReps encode.py: the text's 128 heaviest tokens"),
    Row("methods.promptreps.quantization", "not specified (Lucene impacts are integers)", 100, 100, 100,
        code="PromptReps encode.py: round(weight × 100)"),
    Row("methods.promptreps.hybrid_depth", "DiffRetriever §3.3: each retriever's top-1000 list", 1000, 1000, 1000),
    Row("methods.promptreps.batch_size", "not specified", 8, 8, 8, engineering=True),
)  # fmt: skip

DIFFRETRIEVER = (
    Row("methods.diffretriever.model", "DiffRetriever §4.1: Dream-v0-Instruct-7B, LLaDA-8B-Instruct",
        "tiny-llama", "Dream-org/Dream-v0-Instruct-7B", "Dream-org/Dream-v0-Instruct-7B",
        f"{TEST} (read bidirectionally; no diffusion LM is offline); mini: online only"),
    Row("methods.diffretriever.mask_token", "Dream's <|mask|>", "~", "<|mask|>", "<|mask|>",
        "smoke: a byte the test texts do not contain"),
    Row("methods.diffretriever.query_masks", "DiffRetriever §4.1: K_q = 4 (Dream)", 2, 4, 4, TEST),
    Row("methods.diffretriever.passage_masks", "DiffRetriever §4.1: K_p = 16 (Dream)", 3, 16, 16, TEST),
    Row("methods.diffretriever.scoring", "DiffRetriever §5.2: hybrid for zero-shot", "hybrid", "hybrid", "hybrid"),
    Row("methods.diffretriever.alpha", "DiffRetriever Eq. 4: 1/2", 0.5, 0.5, 0.5),
    Row("methods.diffretriever.max_terms", "not specified", 128, 128, 128, code="as PromptReps' encode.py"),
    Row("methods.diffretriever.quantization", "not specified", 100, 100, 100, code="as PromptReps' encode.py"),
    Row("methods.diffretriever.hybrid_depth", "DiffRetriever §3.3: top-1000 lists", 1000, 1000, 1000),
    Row("methods.diffretriever.batch_size", "not specified", 8, 8, 8, engineering=True),
)  # fmt: skip

DRAMA = (
    Row("methods.drama.temperature", "not specified (Drama §3.1: InfoNCE with τ)", 0.05, 0.05, 0.05,
        "the suite's InfoNCE temperature; Drama gives none"),
    Row("methods.drama.pooling", "Drama Table 5: mean (best; EOS close behind)", "mean", "mean", "mean"),
    Row("methods.drama.bidirectional", "Drama §1, Table 5: bidirectional attention turned on", True, True, True),
    Row("methods.drama.matryoshka_dims", "Drama §4.4, App. A.2: Matryoshka dimensions (sizes not listed; Fig. 4 "
        "plots 128 to 2048)", (64, 128, 256), (64, 128, 256), (64, 128, 256),
        "prefixes below the backbone's hidden size (576 in mini), which always counts too"),
)  # fmt: skip

LLMQL = (
    Row("methods.llmql.temperature", "not specified (LLM-QL Eq. 12 has no temperature; RepLLaMA's recipe)", 0.05,
        0.05, 0.05, "the suite's InfoNCE temperature, for the contrastive stage"),
    Row("methods.llmql.corruption", "LLM-QL §5.2, Table 5: 0.6", 0.6, 0.6, 0.6),
    Row("methods.llmql.attention_block", "LLM-QL §4.1, Eq. 6: on", True, True, True),
    Row("methods.llmql.ql_fraction", "LLM-QL §5.2: QL for 2 epochs, then contrastive for 1 (separate runs)", 0.5,
        0.5, 0.5, "one budget for every method: half the steps each, under one learning-rate schedule"),
    Row("methods.llmql.max_query_tokens", "LLM-QL §5.2: 200", 64, 64, 64,
        "the suite's generated queries are shorter than 64 tokens"),
)  # fmt: skip

REPLUG = (
    Row("methods.replug.judge", "Revela §4.1: LLaMA-3.2-1B; DREAM: not specified", "", "",
        "llama-3.1-8b-instruct",
        f"{TEST}; {OFFLINE} (the backbone); paper: DREAM's judge, one frozen judge for both"),
    Row("methods.replug.eta", "Revela App. B.3: η_m 1e-3 (REPLUG §4: β)", 1e-3, 1e-3, 1e-3),
    Row("methods.replug.tau", "Revela App. B.3: τ_r 1e-3 (REPLUG §4: γ)", 1e-3, 1e-2, 1e-3, TUNED,
        gpu=1e-3),
    Row("methods.replug.likelihood", "Revela App. B.3: −log g(D_i | D_j), a sum", "mean", "mean", "mean",
        "the mean over target tokens (Atlas): η acts alike for targets of any length"),
    Row("methods.replug.layout", "Revela App. B.3: g(D_i | D_j), one chunk given another", "natural",
        "natural", "natural", "DREAM's judge input (Eq. 6) with one passage"),
    Row("methods.replug.max_doc_tokens", "not specified", 128, 128, 128, code="128 (retrieved_max_length)"),
    Row("methods.replug.max_query_tokens", "not specified", 64, 64, 64, code="128 (context_len)"),
    Row("methods.replug.max_target_tokens", "not specified", 128, 128, 128, code="768 (pred_len)"),
    Row("methods.replug.score_batch_size", "not specified", 32, 32, 32, engineering=True),
)  # fmt: skip

REVELA = (
    Row("methods.revela.lm", "Revela §4.1: LLaMA-3.2-1B", "", "", "llama-3.2-1b",
        f"{TEST}; {OFFLINE} (the backbone)"),
    Row("methods.revela.tau", "Revela §4.1: 1e-4", 1e-4, 1e-4, 1e-4),
    Row("methods.revela.v_norm", "Revela App. B.5: on for Wikipedia", True, True, True),
    Row("methods.revela.v_norm_eps", "Revela App. B.5: 1e-6", 1e-6, 1e-6, 1e-6),
    Row("methods.revela.query_half", "Revela App. B.5: the chunk's first half", True, True, True,
        code="the first ⌊n/2⌋ tokens, prefix counted"),
    Row("methods.revela.lm_lora_r", "Revela §4.1: 256", 8, 256, 256, TEST),
    Row("methods.revela.lm_lora_alpha", "not specified", 16, 64, 64, TEST, code="64"),
    Row("methods.revela.lm_lora_dropout", "not specified", 0.1, 0.1, 0.1, code="0.1"),
    Row("methods.revela.lm_lora_targets", "not specified", ALL_LINEAR, ALL_LINEAR, ALL_LINEAR,
        code="q/k/v/o, gate/up/down"),
    Row("methods.revela.max_chunk_tokens", "Revela §4.1: 160", 64, 160, 160, TEST, code="157 (passage_max_len)"),
    Row("methods.revela.batches", "Revela §4.1, App. B.2: chunks end to end, cut into batches", "stream",
        "stream", "stream", "mini leaves Revela out of its main table for its measured cost (docs/budgets.md); "
        "`--methods revela` runs it as published. The stream is laid from the training instances: each "
        "article's K chunks of its candidate set, in document order, so a 16-chunk batch at K = 8 holds two "
        "articles' windows; an article's chunks outside its set are not in it"),
    Row("methods.revela.batch_chunks", "Revela §4.1: 16", 8, 16, 16, TEST),
)  # fmt: skip

DREAM = (
    Row("methods.dream.judge", "DREAM §4.1: Llama-3.1-8B-Instruct", "", "", "llama-3.1-8b-instruct",
        f"{TEST}; {OFFLINE} (the backbone, SmolLM2-135M-Instruct)"),
    Row("methods.dream.num_heads", "DREAM §4.1, App. B, Fig. 3: 16", 4, 16, 16, TEST),
    Row("methods.dream.head_selection", "DREAM §3.2: the QRHead ranking", "qrhead", "qrhead", "qrhead"),
    Row("methods.dream.head_seed", "not specified (Fig. 2's random heads)", 0, 0, 0),
    Row("methods.dream.gate_init", "not specified (§3.3: g = σ(γ), learnable)", 0.0, 2.0, 0.0, TUNED,
        gpu=0.0),
    Row("methods.dream.tau_init", "not specified (§3.1: τ learnable)", 0.05, 0.1, 0.05, TUNED,
        gpu=0.05),
    Row("methods.dream.scalar_lr", "not specified", 1e-2, 1e-2, 1e-2,
        "τ and γ need their own rate to move (an AdamW step is ≈ lr)"),
    Row("methods.dream.layout", "DREAM §3.3, Eq. 6: PASSAGES, QUESTION, TARGET PASSAGE", "natural",
        "natural", "natural", "the tokenisation is not specified"),
    Row("methods.dream.injected_rows", "DREAM §3.3: the query-token rows", "query", "query", "query"),
    Row("methods.dream.judge_lora", "DREAM §4.1, §6 (Fig. 5): frozen judge", False, False, False),
    Row("methods.dream.prefix_cache", "not specified", True, True, True, "exact up to float rounding",
        engineering=True),
    Row("methods.dream.prefix_store_gb", "not specified", 8.0, 8.0, 0.0,
        "paper: ~290 MB per Llama-3.1-8B prefix", engineering=True),
    Row("methods.dream.compile_kernel", "not specified", False, False, False,
        "torch.compile of the injected rows: off until a GPU run measures it", engineering=True),
    Row("methods.dream.judge_lora_r", "not specified (Fig. 5)", 16, 16, 16),
    Row("methods.dream.judge_lora_alpha", "not specified (Fig. 5)", 32, 32, 32),
    Row("methods.dream.max_doc_tokens", "not specified", 128, 128, 128),
    Row("methods.dream.max_query_tokens", "not specified", 64, 64, 64),
    Row("methods.dream.max_target_tokens", "not specified", 128, 128, 128),
    Row("methods.dream.probe_batch_size", "not specified", 4, 8, 8, engineering=True),
)  # fmt: skip

ROWS: tuple[Row, ...] = (
    *DATA, *MODEL, *TRAIN, *EVAL, *BM25, *PROMPTREPS, *DIFFRETRIEVER, *INFONCE, *DRAMA, *LLMQL, *REPLUG, *REVELA, *DREAM
)
