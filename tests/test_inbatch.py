"""Revela's in-batch attention kernel: hand-computed values on a three-chunk toy, equality with the plain
pair-by-pair reference in values and gradients (padding, grouped-query attention), Sim, and the registered
function's two streams."""

import math
from types import SimpleNamespace

import pytest
import torch

from dreambench.attention import (
    InBatchMemory,
    InBatchPlan,
    dreambench_attention,
    inbatch_term,
    reference_inbatch,
    similarity,
)

EPS = 1e-6


def toy(v_norm: bool) -> tuple[torch.Tensor, InBatchPlan]:
    """Three one-head chunks of two tokens (chunk 2's last token is padding); Sim row 0 = (0, 0.2, 0.8)."""
    query = torch.zeros(3, 1, 2, 2, dtype=torch.float64)
    query[0, 0, 0] = torch.tensor([1.0, 0.0])  # chunk 0, first row
    keys = torch.zeros(3, 1, 2, 2, dtype=torch.float64)
    values = torch.zeros(3, 1, 2, 2, dtype=torch.float64)
    keys[1, 0] = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])  # softmax over chunk 1 = (1/4, 3/4)
    values[1, 0] = torch.tensor([[3.0, 4.0], [0.0, 2.0]])  # norms 5 and 2
    keys[2, 0] = torch.tensor([[0.0, 0.0], [100.0, 0.0]])  # the padded key would take all the mass
    values[2, 0] = torch.tensor([[1.0, 1.0], [999.0, 999.0]])
    key_mask = torch.tensor([[True, True], [True, True], [True, False]])
    sim = torch.tensor([[[0.0, 0.2, 0.8], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]], dtype=torch.float64)
    memory = InBatchMemory()
    memory.record(0, keys, values)
    return query, InBatchPlan(memory, sim, key_mask, v_norm=v_norm, eps=EPS)


@pytest.mark.parametrize("v_norm", [False, True])
def test_inbatch_term_equals_the_hand_computed_value(v_norm):
    query, plan = toy(v_norm)
    out = inbatch_term(query, plan.memory.keys[0], plan.memory.values[0], plan, scaling=1.0)  # (N, L, H, D)
    b01 = torch.tensor([0.25 * 3 + 0.75 * 0, 0.25 * 4 + 0.75 * 2])  # (0.75, 2.5)
    b02 = torch.tensor([1.0, 1.0])  # chunk 2 has one real token: all the mass on it
    if v_norm:  # Eq. 8: divide by the attention-weighted value norms
        b01 = b01 / (0.25 * 5 + 0.75 * 2 + EPS)
        b02 = b02 / (math.sqrt(2.0) + EPS)
    expected = 0.2 * b01 + 0.8 * b02  # Eq. 6 / 9
    assert torch.allclose(out[0, 0, 0], expected.double(), atol=1e-12)
    ref = reference_inbatch(
        query, plan.memory.keys[0], plan.memory.values[0], plan.key_mask, plan.sim, 1.0, v_norm, EPS
    )
    assert torch.allclose(out, ref, atol=1e-12)


def test_similarity_is_a_softmax_over_the_other_chunks():
    e = torch.nn.functional.normalize(torch.tensor([[[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]]), dim=-1)
    sim = similarity(e, e, tau=0.5)
    assert torch.equal(sim.diagonal(dim1=1, dim2=2), torch.zeros(1, 3))
    # row 0: cos to chunk 1 = 0.8, to chunk 2 = 0 → softmax(1.6, 0)
    assert math.isclose(float(sim[0, 0, 1]), math.exp(1.6) / (math.exp(1.6) + 1.0), rel_tol=1e-6)
    assert torch.allclose(sim.sum(-1), torch.ones(1, 3))


G, C, H, KVH, L, D = 2, 3, 4, 2, 7, 5  # grouped-query attention: 2 query heads per KV head


def random_inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(G * C, H, L, D, generator=gen, dtype=torch.float64, requires_grad=True)
    key = torch.randn(G * C, KVH, L, D, generator=gen, dtype=torch.float64, requires_grad=True)
    value = torch.randn(G * C, KVH, L, D, generator=gen, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(G, C, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 3, 5, 1, 6, 7])  # right padding, one chunk of a single token
    key_mask = torch.arange(L)[None, :] < lengths[:, None]
    return query, key, value, emb, key_mask


@pytest.mark.parametrize("v_norm", [False, True])
def test_kernel_equals_reference_values_and_gradients_with_padding(v_norm):
    query, key, value, emb, key_mask = random_inputs()

    def run(fn):
        sim = similarity(
            torch.nn.functional.normalize(emb, dim=-1), torch.nn.functional.normalize(emb, dim=-1), 0.3
        )
        if fn is reference_inbatch:
            out = reference_inbatch(query, key, value, key_mask, sim, D**-0.5, v_norm)
        else:
            memory = InBatchMemory()
            memory.record(0, key, value)
            out = inbatch_term(query, key, value, InBatchPlan(memory, sim, key_mask, v_norm), D**-0.5)
        return out, torch.autograd.grad(out.square().sum(), (query, key, value, emb))

    fast, grads_fast = run(inbatch_term)
    ref, grads_ref = run(reference_inbatch)
    assert torch.allclose(fast, ref, atol=1e-10)
    for a, b in zip(grads_fast, grads_ref, strict=True):
        assert a.abs().sum() > 0 and torch.allclose(a, b, atol=1e-10)
    # padded keys of stream 1 get no gradient: nothing attends to them
    grad_key = grads_fast[1]
    assert torch.equal(grad_key[1, :, 3:], torch.zeros_like(grad_key[1, :, 3:]))


def test_registered_kernel_records_stream_one_and_adds_the_term_in_stream_two():
    query, key, value, emb, key_mask = random_inputs()
    module = SimpleNamespace(layer_idx=3, num_key_value_groups=H // KVH, is_causal=True, training=False)
    memory = InBatchMemory()
    stock, _ = dreambench_attention(module, query, key, value, None, scaling=D**-0.5, inbatch_record=memory)
    assert memory.keys[3] is key and memory.values[3] is value
    e = torch.nn.functional.normalize(emb, dim=-1)
    plan = InBatchPlan(memory, similarity(e, e, 0.3), key_mask)
    both, _ = dreambench_attention(module, query, key, value, None, scaling=D**-0.5, inbatch_attend=plan)
    assert torch.allclose(both - stock, inbatch_term(query, key, value, plan, D**-0.5), atol=1e-10)
    module.layer_idx = 4
    with pytest.raises(ValueError, match="no keys for layer 4"):
        dreambench_attention(module, query, key, value, None, scaling=D**-0.5, inbatch_attend=plan)


def test_bad_plans_are_rejected():
    memory = InBatchMemory()
    with pytest.raises(ValueError, match="C ≥ 2"):
        InBatchPlan(memory, torch.ones(1, 1, 1), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="do not form"):
        InBatchPlan(memory, torch.ones(1, 2, 2), torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least one real token"):
        InBatchPlan(memory, torch.ones(1, 2, 2), torch.tensor([[True], [False]]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_equals_reference_on_gpu(dtype):
    query, key, value, emb, key_mask = (t.detach().cuda() for t in random_inputs())
    query, key, value = (t.to(dtype).requires_grad_() for t in (query, key, value))
    emb = emb.float().requires_grad_()
    e = torch.nn.functional.normalize(emb, dim=-1)
    sim = similarity(e, e, 0.3)
    fast = inbatch_term(query, key, value, InBatchPlan(InBatchMemory(), sim, key_mask), D**-0.5)
    ref = reference_inbatch(*(t.float() for t in (query, key, value)), key_mask, sim, D**-0.5, True)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    assert torch.allclose(fast.float(), ref, atol=tol, rtol=tol)
    grads_fast = torch.autograd.grad(fast.float().square().sum(), (query, key, value, emb), retain_graph=True)
    grads_ref = torch.autograd.grad(ref.square().sum(), (query, key, value, emb))
    for a, b in zip(grads_fast, grads_ref, strict=True):
        assert torch.allclose(a.float(), b.float(), atol=10 * tol, rtol=10 * tol)
