"""A trained retriever as a folder other tools load: its peft adapter, the merged weights as a
sentence-transformers model (the same prompts, pooling, EOS and normalisation the suite encodes with), a
``dreambench.json`` with everything needed to rebuild it, and a model card.

Loading the folder with ``SentenceTransformer(folder)`` and encoding with ``prompt_name="query"`` or
``"passage"`` gives the suite's embeddings (``tests/test_export.py``). A retriever with bidirectional attention
(Drama) needs the suite's 4D mask, which sentence-transformers does not pass: it is exported as an adapter and
``dreambench.json`` only.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from .config import to_jsonable
from .method import TrainedDenseMethod
from .models.backbones import BACKBONES, checkpoint_path
from .workspace import write_json_atomic

# the licences a user of an exported model inherits: the base weights' and the training text's
BASE_LICENCES = {
    "smollm2-135m-instruct": "apache-2.0",
    "gemma3-270m": "gemma (Gemma Terms of Use)",
    "tiny-llama": "none (random weights built in code)",
}
TEXT_LICENCES = {
    "wiki-offline": "CC BY-SA 4.0 (English Wikipedia lead sections)",
    "tevatron-wiki-nq": "CC BY-SA 3.0 (Wikipedia, Tevatron/wikipedia-nq-corpus)",
    "synthetic": "none (generated in code)",
}


def base_weights_digest(name: str, workspace) -> dict[str, str] | None:
    """sha256 of each weights file the base model loads from (for a GGUF package: the dequantised cache)."""
    try:
        folder = Path(checkpoint_path(name, workspace))
    except (ValueError, FileNotFoundError):
        return None
    if not folder.is_dir():
        return None  # a hub id: its revision names it
    digests = {}
    for path in sorted(folder.glob("*.safetensors")):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests[path.name] = digest.hexdigest()
    return digests


def _eos_appending(tokenizer):
    """A copy of ``tokenizer`` whose special tokens are what the suite adds: its own (a BOS, if it adds one)
    and the EOS after the text, whose final state the suite pools."""
    from tokenizers import processors

    tok = copy.deepcopy(tokenizer)
    leading = tok("", add_special_tokens=True)["input_ids"]  # what the tokenizer itself adds (BOS or nothing)
    special = [(tok.convert_ids_to_tokens(i), i) for i in leading] + [(tok.eos_token, tok.eos_token_id)]
    head = " ".join(f"{t}:0" for t, _ in special[:-1])
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{head} $A:0 {tok.eos_token}:0".strip(), special_tokens=list(dict(special).items())
    )
    return tok


def export_retriever(trained: TrainedDenseMethod, out: Path, scores: dict[str, Any] | None = None) -> Path:
    """Write ``trained`` (its cached weights are loaded here) into ``out``; returns ``out``."""
    config = trained.config
    out.mkdir(parents=True, exist_ok=True)
    trained.prepare(merge=False)  # the LoRA adapter stays separate, to be saved
    retriever = trained.retriever
    retriever.save_adapter(out / "adapter")
    eval_lengths = {"query": retriever.length_cap("query", config.eval.max_query_tokens),
                    "passage": retriever.length_cap("passage", config.eval.max_passage_tokens)}  # fmt: skip
    # sentence-transformers adds a prompt before the text, not a template around it, nor a 4D attention mask
    sentence_transformers = not retriever.bidirectional and config.model.input_template == "prefix"
    if sentence_transformers:
        retriever.merge_lora()
        retriever.backbone.save_pretrained(out)
        _eos_appending(retriever.tokenizer).save_pretrained(out)
        pooling = "lasttoken" if retriever.pooling == "last" else "mean"
        write_json_atomic(out / "modules.json", [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ])  # fmt: skip
        write_json_atomic(out / "sentence_bert_config.json", {"max_seq_length": max(eval_lengths.values())})
        (out / "1_Pooling").mkdir(exist_ok=True)
        write_json_atomic(out / "1_Pooling" / "config.json", {
            "word_embedding_dimension": retriever.backbone.config.hidden_size,
            "pooling_mode_lasttoken": pooling == "lasttoken", "pooling_mode_mean_tokens": pooling == "mean",
        })  # fmt: skip
        (out / "2_Normalize").mkdir(exist_ok=True)
        write_json_atomic(out / "config_sentence_transformers.json", {
            "prompts": {"query": config.model.query_prefix, "passage": config.model.passage_prefix},
            "default_prompt_name": None, "similarity_fn_name": "cosine",
        })  # fmt: skip
    record = {
        "method": trained.name, "experiment": trained.experiment, "profile": config.profile,
        "seed": config.train.seed, "checkpoint": trained.checkpoint_dir().name,
        "base_model": config.model.backbone, "base_weights_sha256": base_weights_digest(config.model.backbone,
                                                                                        trained.workspace),
        "model_config": to_jsonable(config.model),
        "pooling": retriever.pooling, "bidirectional": retriever.bidirectional,
        "prefixes": {"query": config.model.query_prefix, "passage": config.model.passage_prefix},
        "eos_appended": True, "normalised": True, "evaluation_lengths": eval_lengths,
        "sentence_transformers": sentence_transformers,
        "training": {k: v for k, v in trained.training_summary.items() if not isinstance(v, dict | list)},
        "training_data": trained.training_summary.get("training_data"), "scores": scores or {},
        "licences": {"base_model": BASE_LICENCES.get(config.model.backbone, "see the base model's card"),
                     "training_text": TEXT_LICENCES.get(config.data.source, "see the source")},
    }  # fmt: skip
    write_json_atomic(out / "dreambench.json", record)
    (out / "README.md").write_text(model_card(record, config), encoding="utf-8")
    trained.close()
    return out


def model_card(record: dict[str, Any], config) -> str:
    spec = BACKBONES.get(record["base_model"]) if record["base_model"] in BACKBONES else None
    lines = [
        "---",
        f"base_model: {spec.hub_id if spec and spec.hub_id else record['base_model']}",
        f"library_name: {'sentence-transformers' if record['sentence_transformers'] else 'peft'}",
        "tags: [dense-retrieval, dreambench]",
        "---",
        "",
        f"# {record['method']} / {record['experiment']} (profile {record['profile']}, seed {record['seed']})",
        "",
        f"A dense retriever trained by dreambench's `{record['method']}` adapter: LoRA on "
        f"`{record['base_model']}`, {record['pooling']}-token pooling, L2-normalised, the text preceded by "
        f"`{record['prefixes']['query']}` (queries) or `{record['prefixes']['passage']}` (passages) and followed "
        "by the EOS token.",
        "",
        *(["```python", "from sentence_transformers import SentenceTransformer", "model = SentenceTransformer(FOLDER)",
            'q = model.encode(["…"], prompt_name="query"); d = model.encode(["…"], prompt_name="passage")', "```"]
          if record["sentence_transformers"] else
          ["Bidirectional attention: load `adapter/` with peft into the suite's `DenseRetriever` (sentence-"
           "transformers cannot pass its attention mask)."]),
        "",
        "| | |",
        "|---|---|",
        f"| training data | `{config.data.source}`, {config.data.num_train} instances of K = "
        f"{config.data.num_candidates}, queries by `{config.data.query_generator}` "
        f"({(record['training_data'] or {}).get('folder', '?')}) |",
        f"| recipe | {config.train.steps} steps × {config.train.batch_size * config.train.grad_accum} instances, "
        f"lr {config.train.lr:g}, seed {record['seed']} |",
        f"| base weights sha256 | {json.dumps(record['base_weights_sha256'])} |",
        f"| licences | base model: {record['licences']['base_model']}; training text: "
        f"{record['licences']['training_text']} |",
        f"| scores (NDCG@10) | {json.dumps(record['scores']) if record['scores'] else 'none recorded'} |",
        "",
    ]
    return "\n".join(lines)
