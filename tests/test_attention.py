"""The score-injection kernel equals the plain Eq. 7–9 reference (values and gradients), and stock attention
when g = 0 or no head is selected; the attention probe equals QRHead's Eq. 4 on the full matrix."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from dreambench.attention import (
    InjectionPlan,
    SpanIndex,
    dreambench_attention,
    query_attention_mass,
    reference_attention,
    use_kernel,
)

B, H, KVH, T, D = 2, 6, 2, 40, 8  # grouped-query attention: 3 query heads per KV head
DOC_SPANS = [[(2, 7), (8, 15), (16, 20)], [(1, 4), (5, 13), (14, 22)]]
QUERY_SPANS = [(22, 27), (24, 31)]
VALID_LENGTH = [34, 40]  # row 0 is right-padded


def padding_mask() -> torch.Tensor:
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keys = torch.arange(T)[None, :] < torch.tensor(VALID_LENGTH)[:, None]  # (B, T)
    return (causal[None] & keys[:, None, :])[:, None]  # (B, 1, T, T), True = may attend


def make_inputs(seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=gen, dtype=dtype, requires_grad=True)
    k = torch.randn(B, KVH, T, D, generator=gen, dtype=dtype, requires_grad=True)
    v = torch.randn(B, KVH, T, D, generator=gen, dtype=dtype, requires_grad=True)
    score_logits = torch.randn(B, 3, generator=gen, dtype=dtype, requires_grad=True)
    gamma = torch.tensor(0.3, dtype=dtype, requires_grad=True)
    return q, k, v, score_logits, gamma


def plan_for(score_logits, gamma, heads=None) -> InjectionPlan:
    heads = heads if heads is not None else {0: [1, 4]}
    spans = SpanIndex.from_spans(DOC_SPANS, QUERY_SPANS)
    pairs = [(layer, h) for layer, hs in heads.items() for h in hs]
    return InjectionPlan(
        spans, score_logits.softmax(-1), torch.sigmoid(gamma), InjectionPlan.heads_by_layer(pairs)
    )


MODULE = SimpleNamespace(layer_idx=0, num_key_value_groups=H // KVH, is_causal=True, training=False)


def kernel(q, k, v, mask, plan):
    out, _ = dreambench_attention(MODULE, q, k, v, mask, scaling=D**-0.5, score_injection=plan)
    return out


@pytest.mark.parametrize(("use_mask", "compiled"), [(True, False), (False, False), (True, True)])
def test_kernel_equals_reference_values_and_gradients(monkeypatch, use_mask, compiled):
    """The fused kernel, and its ``torch.compile`` path (``InjectionPlan.compiled``: captured by dynamo and
    differentiated by AOT autograd; on the CPU without code generation, ``aot_eager``; inductor in the GPU test)."""
    from dreambench.attention import injection

    monkeypatch.setattr(injection, "COMPILE_BACKEND", "aot_eager")
    mask = padding_mask() if use_mask else None
    q, k, v, logits, gamma = make_inputs()
    fast = kernel(q, k, v, mask, dataclasses.replace(plan_for(logits, gamma), compiled=compiled))
    q2, k2, v2, logits2, gamma2 = (t.detach().clone().requires_grad_() for t in (q, k, v, logits, gamma))
    ref = reference_attention(q2, k2, v2, mask, D**-0.5, plan_for(logits2, gamma2), layer=0)
    assert torch.allclose(fast, ref, rtol=0, atol=1e-12)
    upstream = torch.randn_like(fast)
    (fast * upstream).sum().backward()
    (ref * upstream).sum().backward()
    for name, a, b in [
        ("q", q, q2),
        ("k", k, k2),
        ("v", v, v2),
        ("scores", logits, logits2),
        ("gate", gamma, gamma2),
    ]:
        assert a.grad is not None and torch.allclose(a.grad, b.grad, rtol=0, atol=1e-10), name
    assert logits.grad.abs().sum() > 0 and gamma.grad.abs() > 0


def test_injection_changes_only_selected_heads_and_query_rows():
    q, k, v, logits, gamma = make_inputs()
    stock = kernel(q, k, v, padding_mask(), None)
    injected = kernel(q, k, v, padding_mask(), plan_for(logits, gamma))
    changed = (injected - stock).abs().amax(dim=-1) > 1e-12  # (B, T, H)
    expected = torch.zeros_like(changed)
    for b, (s, e) in enumerate(QUERY_SPANS):
        expected[b, s:e][:, [1, 4]] = True
    assert torch.equal(changed, expected)


def test_gate_zero_or_no_selected_head_is_stock_attention():
    q, k, v, logits, _ = make_inputs()
    stock = kernel(q, k, v, padding_mask(), None)
    closed = plan_for(logits, torch.tensor(-torch.inf, dtype=torch.float64))
    assert torch.sigmoid(torch.tensor(-torch.inf)) == 0
    assert torch.equal(kernel(q, k, v, padding_mask(), closed), stock)
    elsewhere = plan_for(logits, torch.tensor(0.5, dtype=torch.float64), heads={3: [0, 1, 2]})
    assert torch.equal(kernel(q, k, v, padding_mask(), elsewhere), stock)
    eager = reference_attention(q, k, v, padding_mask(), D**-0.5, None, layer=0)
    assert torch.allclose(stock, eager, atol=1e-10)


def test_full_gate_gives_documents_exactly_the_retriever_mass():
    """With g = 1 a query row's attention over document j sums to p_j (and is zero elsewhere)."""
    q, k, v, logits, _ = make_inputs()
    plan = plan_for(logits, torch.tensor(torch.inf, dtype=torch.float64))
    # value = one-hot of the document a key belongs to: the output then reads off the attention mass per document
    onehot = torch.zeros(B, KVH, T, D, dtype=torch.float64)
    for b, row in enumerate(DOC_SPANS):
        for j, (s, e) in enumerate(row):
            onehot[b, :, s:e, j] = 1.0
    out = kernel(q, k, onehot, padding_mask(), plan)
    p = logits.softmax(-1)
    for b, (s, e) in enumerate(QUERY_SPANS):
        for h in (1, 4):
            assert torch.allclose(out[b, s:e, h, :3], p[b].expand(e - s, -1), atol=1e-12)


def test_probe_mass_equals_eq4_on_the_full_matrix():
    q, k, _, _, _ = make_inputs()
    spans = SpanIndex.from_spans(DOC_SPANS, QUERY_SPANS)
    mass = query_attention_mass(q.detach(), k.detach(), padding_mask(), D**-0.5, spans)  # (B, H, K)
    kr = k.detach().repeat_interleave(H // KVH, dim=1)
    scores = (q.detach() @ kr.transpose(-1, -2)) * D**-0.5
    alpha = torch.softmax(scores.masked_fill(~padding_mask(), float("-inf")), dim=-1)
    for b in range(B):
        qs, qe = QUERY_SPANS[b]
        for j, (s, e) in enumerate(DOC_SPANS[b]):
            expected = alpha[b, :, qs:qe, s:e].sum(-1).mean(-1)  # (H,)
            assert torch.allclose(mass[b, :, j].double(), expected, atol=1e-6)


def test_bad_spans_are_rejected():
    with pytest.raises(ValueError, match="overlap"):
        SpanIndex.from_spans([[(0, 5)]], [(3, 6)])
    with pytest.raises(ValueError, match="non-empty"):
        SpanIndex.from_spans([[(2, 2)]], [(3, 6)])
    with pytest.raises(ValueError, match="non-empty"):  # one row's query empty, the other's not
        SpanIndex.from_spans([[(0, 2)], [(0, 2)]], [(3, 6), (4, 4)])


# ---- inside a real transformers model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_judge():
    from dreambench.models.backbones import load_model

    model = load_model("tiny-llama", workspace=None, causal_lm=True, seed=1).double().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def test_registered_kernel_is_stock_without_kwargs(tiny_judge):
    ids = torch.randint(0, 250, (2, 30))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[0, 25:] = 0
    tiny_judge.set_attn_implementation("sdpa")
    stock = tiny_judge(input_ids=ids, attention_mask=mask).logits
    use_kernel(tiny_judge)
    ours = tiny_judge(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(stock, ours, atol=1e-10)


def test_gradients_reach_scores_only_from_the_lowest_selected_layer_up(tiny_judge):
    use_kernel(tiny_judge)
    ids = torch.randint(0, 250, (1, 30))
    spans = SpanIndex.from_spans([[(1, 6), (7, 12), (13, 18)]], [(19, 24)])
    scores = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    gamma = torch.zeros((), dtype=torch.float64, requires_grad=True)
    plan = InjectionPlan(
        spans, scores.softmax(-1), torch.sigmoid(gamma), InjectionPlan.heads_by_layer([(2, 1), (3, 0)])
    )
    needs_grad = []
    hooks = [
        layer.register_forward_hook(
            lambda m, i, o: needs_grad.append(o[0].requires_grad if isinstance(o, tuple) else o.requires_grad)
        )
        for layer in tiny_judge.model.layers
    ]
    try:
        logits = tiny_judge(input_ids=ids, score_injection=plan).logits
    finally:
        for h in hooks:
            h.remove()
    assert needs_grad == [False, False, True, True]  # layers 0-1: no autograd graph, no backward cost
    logits[0, 25:].logsumexp(-1).sum().backward()
    assert scores.grad is not None and scores.grad.abs().sum() > 0 and gamma.grad is not None
    assert all(p.grad is None for p in tiny_judge.parameters())  # the frozen judge never receives gradients


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compiled", [False, True])
def test_kernel_equals_reference_on_gpu(compiled):
    mask = padding_mask().cuda()
    q, k, v, logits, gamma = (t.detach().float().cuda().requires_grad_() for t in make_inputs())
    spans = SpanIndex.from_spans(DOC_SPANS, QUERY_SPANS, device="cuda")
    plan = InjectionPlan(
        spans,
        logits.softmax(-1),
        torch.sigmoid(gamma),
        InjectionPlan.heads_by_layer([(0, 1), (0, 4)], "cuda"),
        compiled,
    )
    fast = kernel(q, k, v, mask, plan)
    ref = reference_attention(q, k, v, mask, D**-0.5, plan, layer=0)
    assert torch.allclose(fast, ref, atol=1e-4)
    grads_fast = torch.autograd.grad(fast.square().sum(), (q, k, v, logits, gamma), retain_graph=True)
    grads_ref = torch.autograd.grad(ref.square().sum(), (q, k, v, logits, gamma))
    for a, b in zip(grads_fast, grads_ref, strict=True):
        assert torch.allclose(a, b, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_prefix_cached_judge_on_gpu_equals_the_full_pass_and_the_cpu():
    """DREAM's judge pass on CUDA (fp32 tiny Llama, padded batch, 4 injected heads): the prefix-cached pass
    equals the full pass, and both equal the fp64 CPU pass, in loss and in the retriever scores' gradient."""
    from judge_cases import judge_case

    from dreambench.attention import use_kernel
    from dreambench.models.backbones import load_model, tiny_tokenizer
    from dreambench.models.lm import LanguageModel

    results = {}
    for device, dtype in (("cpu", torch.float64), ("cuda", torch.float32)):
        model = load_model("tiny-llama", workspace=None, causal_lm=True, seed=3).to(device=device, dtype=dtype)
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        judge = LanguageModel(use_kernel(model.eval()), tiny_tokenizer(), "tiny-llama")
        inputs, scores, plan = judge_case(judge, 0.7)
        for cached in (False, True):
            loss = judge.target_loss(inputs, plan, prefix_cache=cached)
            (grad,) = torch.autograd.grad(loss, scores, retain_graph=True)
            results[device, cached] = (loss.detach().double().cpu(), grad.double().cpu())
    reference_loss, reference_grad = results["cpu", False]
    assert reference_grad.abs().max() > 1e-6  # the comparison is not between two zeros
    for (device, cached), (loss, grad) in results.items():
        tolerance = 1e-10 if device == "cpu" else 1e-4
        assert torch.allclose(loss, reference_loss, rtol=0, atol=tolerance), (device, cached)
        assert torch.allclose(grad, reference_grad, rtol=0, atol=tolerance), (device, cached)


@pytest.mark.parametrize("use_mask", [True, False])
def test_eager_full_matrix_equals_reference_values_and_gradients(use_mask):
    """The vectorised eager implementation (the speed benchmarks' baseline) is Eq. 7–9 too."""
    from dreambench.attention import eager_attention

    mask = padding_mask() if use_mask else None
    q, k, v, logits, gamma = make_inputs(seed=2)
    heads = {0: [0, 1, 4]}
    eager = eager_attention(q, k, v, mask, D**-0.5, plan_for(logits, gamma, heads), layer=0)
    q2, k2, v2, logits2, gamma2 = (t.detach().clone().requires_grad_() for t in (q, k, v, logits, gamma))
    ref = reference_attention(q2, k2, v2, mask, D**-0.5, plan_for(logits2, gamma2, heads), layer=0)
    assert torch.allclose(eager, ref, rtol=0, atol=1e-12)
    upstream = torch.randn_like(eager)
    (eager * upstream).sum().backward()
    (ref * upstream).sum().backward()
    for a, b in [(q, q2), (k, k2), (v, v2), (logits, logits2), (gamma, gamma2)]:
        assert torch.allclose(a.grad, b.grad, rtol=0, atol=1e-10)
