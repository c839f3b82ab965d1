"""DREAM pieces: judge input layout and spans, head selection, and the adapter end to end (smoke profile)."""

import json

import pytest
import torch
from judge_cases import judge_case

from dreambench.config import apply_overrides
from dreambench.models.backbones import tiny_tokenizer
from dreambench.models.lm import build_judge_inputs, judge_layout
from dreambench.plan import plan_jobs
from dreambench.profiles import PROFILES, Experiment, Profile
from dreambench.report import render, results_frame, training_table
from dreambench.results import ResultKey
from dreambench.runner import Runner
from dreambench.studies.dream.heads import HeadRanking, HeadScore, rank_heads, select_heads

SMOKE = PROFILES.get("smoke").config


def test_judge_layout_spans_cover_exactly_each_piece():
    tok = tiny_tokenizer()
    inputs = build_judge_inputs(
        tok, ["why?", "who is it"], [["doc one", "doc two"], ["alpha", "beta gamma"]], ["target a", "tb and more"],
        max_doc_tokens=100, max_query_tokens=100, max_target_tokens=100,
    )  # fmt: skip
    text = [tok.decode(row) for row in inputs.input_ids]
    assert text[0].startswith("PASSAGES:\n[1] doc one\n[2] doc two\nQUESTION: why?\nTARGET PASSAGE: target a")
    s = inputs.spans
    for b, (docs, query, target) in enumerate(
        [(["doc one", "doc two"], "why?", "target a"), (["alpha", "beta gamma"], "who is it", "tb and more")]
    ):
        # natural layout: each piece carries its word-initial space, as in running text
        for j, doc in enumerate(docs):
            assert tok.decode(inputs.input_ids[b, s.doc_index[b, j][s.doc_mask[b, j]]]) == " " + doc
        assert tok.decode(inputs.input_ids[b, s.query_index[b][s.query_mask[b]]]) == " " + query
        assert tok.decode(inputs.input_ids[b, inputs.target_index[b][inputs.target_mask[b]]]) == " " + target
    lengths = inputs.attention_mask.sum(1)
    assert lengths.min() < inputs.attention_mask.shape[1]  # the shorter row is right-padded
    short = int(lengths.argmin())
    assert (
        inputs.attention_mask[short, : lengths.min()].all()
        and not inputs.attention_mask[short, lengths.min() :].any()
    )


def test_natural_layout_tokenises_as_running_text_and_pieces_layout_does_not():
    from dreambench.models.lm import LAYOUTS

    tok = tiny_tokenizer()
    args = (["why?"], [["doc one", "doc two"]], ["target a"], 100, 100, 100)
    text = "PASSAGES:\n[1] doc one\n[2] doc two\nQUESTION: why?\nTARGET PASSAGE: target a"
    natural = build_judge_inputs(tok, *args, LAYOUTS["natural"])
    running = tok(text, add_special_tokens=False)["input_ids"]
    assert natural.input_ids[0, -len(running) :].tolist() == running
    pieces = build_judge_inputs(tok, *args, LAYOUTS["pieces"])
    assert tok.decode(pieces.input_ids[0]) == tok.decode(natural.input_ids[0])  # same text, other spans
    query = pieces.input_ids[0, pieces.spans.query_index[0][pieces.spans.query_mask[0]]]
    assert tok.decode(query) == "why?"
    with pytest.raises(ValueError, match="unknown"):
        judge_layout("fancy")


def test_suffix_rows_cover_the_query_and_everything_after_it():
    tok = tiny_tokenizer()
    args = (["why?"], [["doc one", "doc two"]], ["target a"], 100, 100, 100, judge_layout("natural"))
    query_only = build_judge_inputs(tok, *args, "query")
    suffix = build_judge_inputs(tok, *args, "suffix")
    assert torch.equal(query_only.input_ids, suffix.input_ids) and torch.equal(
        query_only.target_index, suffix.target_index
    )
    start = int(query_only.spans.query_index[0, 0])
    rows = suffix.spans.query_index[0][suffix.spans.query_mask[0]].tolist()
    assert rows == list(range(start, suffix.input_ids.shape[1]))
    with pytest.raises(ValueError, match="injected rows"):
        build_judge_inputs(tok, *args, "everything")


def test_truncation_limits_each_piece():
    tok = tiny_tokenizer()
    inputs = build_judge_inputs(tok, ["q" * 50], [["d" * 50, "e" * 50]], ["t" * 50], 10, 5, 7)
    assert int(inputs.spans.doc_mask.sum()) == 20 and int(inputs.spans.query_mask.sum()) == 5
    assert int(inputs.target_mask.sum()) == 7


def test_rank_heads_finds_the_informative_head():
    from dreambench.data.training import TrainingInstance

    probe = [
        TrainingInstance(f"p{i}", "q", ("a", "b", "c"), ("x::0", "y::0", "z::0"), i % 3, "x", "t")
        for i in range(6)
    ]
    corrected = torch.randn(6, 2, 3, 3, generator=torch.Generator().manual_seed(0)) * 0.01
    for n, inst in enumerate(probe):
        corrected[n, 1, 2, inst.target_index] = 1.0  # layer 1, head 2 always points at the target
    ranking = rank_heads(corrected, probe, "test")
    assert (
        ranking.heads[0].layer == 1
        and ranking.heads[0].head == 2
        and ranking.heads[0].score == pytest.approx(1.0)
    )
    assert ranking.probe_size == 6 and len(ranking.heads) == 6


def test_head_selection_strategies():
    ranking = HeadRanking(
        "j", 8, 4, 10, tuple(HeadScore(ly, h, 1.0 - 0.01 * (4 * ly + h)) for ly in range(8) for h in range(4))
    )
    assert select_heads("qrhead", 3, 8, 4, ranking) == [(0, 0), (0, 1), (0, 2)]
    rand = select_heads("random", 5, 8, 4, seed=1)
    assert len(set(rand)) == 5 and rand == select_heads("random", 5, 8, 4, seed=1) != select_heads(
        "random", 5, 8, 4, seed=2
    )
    middle = select_heads("random-middle", 6, 8, 4, seed=0)
    assert all(2 <= layer < 6 for layer, _ in middle)
    with pytest.raises(ValueError, match="between 1 and 32"):
        select_heads("random", 33, 8, 4)
    with pytest.raises(ValueError, match="unknown strategy"):
        select_heads("best", 2, 8, 4)


def test_dream_trains_and_evaluates_through_the_runner(workspace):
    config = apply_overrides(SMOKE, {"methods.dream.num_heads": 4})
    profile = Profile("smoke", "", config, (Experiment("dream"),))
    (outcome,) = Runner(workspace).run(plan_jobs(profile, config))
    assert outcome.status == "computed"
    payload = json.loads(
        ResultKey("smoke", "dream", "default", "wiki-desc2lead").json_path(workspace.results_dir).read_text()
    )
    training = payload["training"]
    assert len(training["heads"]) == 4 and training["steps"] == config.train.steps
    assert {"top1", "mrr"} <= set(training["heldout_before"]) and {"top1", "mrr"} <= set(
        training["heldout_after"]
    )
    assert 0 < training["gate"] < 1 and training["tau"] > 0
    # evaluating again reuses the trained weights (final.pt), no retraining
    assert [o.status for o in Runner(workspace, overwrite=True).run(plan_jobs(profile, config))] == [
        "computed"
    ]
    log_lines = (workspace.cache_dir / "checkpoints" / "smoke").glob("dream-*/train_log.jsonl")
    assert sum(len(p.read_text().splitlines()) for p in log_lines) == config.train.steps
    # a run killed between its weights and its summary is not taken as finished: it resumes and completes
    (summary,) = (workspace.cache_dir / "checkpoints" / "smoke").glob("dream-*/summary.json")
    summary.unlink()
    assert [o.status for o in Runner(workspace, overwrite=True).run(plan_jobs(profile, config))] == [
        "computed"
    ]
    assert json.loads(summary.read_text())["heldout_after"] == training["heldout_after"]
    # the report lists the training run with its held-out ranking before and after
    table = training_table(results_frame(workspace.results_dir, "smoke"))
    row = "dream [seed 0]"
    assert list(table.index) == [row] and table.loc[row, "steps"] == config.train.steps
    assert table.loc[row, "held-out top-1 after"] == training["heldout_after"]["top1"]
    assert (
        table.loc[row, "τ start"] == config.methods["dream"].get("tau_init", 0.05)
        and table.loc[row, "τ end"] > 0
    )
    # the run records which instances it read: the sha256 of the built files, named in the report
    import hashlib

    folder = next((workspace.cache_dir / "training-data").glob(training["training_data"]["folder"]))
    digest = hashlib.sha256()
    for name in ("train.jsonl", "heldout.jsonl", "probe.jsonl"):
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    assert training["training_data"]["sha256"] == digest.hexdigest()
    render(workspace.results_dir, workspace.reports_dir, "smoke")
    text = (workspace.reports_dir / "smoke" / "report.md").read_text()
    assert "## Training" in text and f"Training data `{folder.name}`: the 1 run(s)" in text
    assert digest.hexdigest()[:12] in text
    assert (workspace.reports_dir / "smoke" / "training.csv").is_file()


def test_bad_dream_params_are_clear_errors(workspace):
    from dreambench.method import METHODS

    with pytest.raises(ValueError, match="head_selection"):
        METHODS.get("dream")(apply_overrides(SMOKE, {"methods.dream.head_selection": "best"}), workspace)
    with pytest.raises(ValueError, match="tau_init"):
        METHODS.get("dream")(apply_overrides(SMOKE, {"methods.dream.tau_init": 0}), workspace)


@pytest.mark.parametrize("gate", [0.0, 0.7, 1.0])
def test_prefix_cached_judge_equals_the_full_pass_in_loss_and_score_gradients(gate):
    """fp64 tiny Llama (grouped-query attention), a padded batch: equal to 1e-10."""
    from dreambench.models.backbones import load_model
    from dreambench.models.lm import LanguageModel

    model = load_model("tiny-llama", workspace=None, causal_lm=True, seed=3).double().eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    from dreambench.attention import use_kernel

    judge = LanguageModel(use_kernel(model), tiny_tokenizer(), "tiny-llama")
    inputs, scores, plan = judge_case(judge, gate)
    full = judge.target_loss(inputs, plan)
    (full_grad,) = torch.autograd.grad(full, scores, retain_graph=True)
    cached = judge.target_loss(inputs, plan, prefix_cache=True)
    (cached_grad,) = torch.autograd.grad(cached, scores)
    assert torch.allclose(full, cached, rtol=0, atol=1e-10)
    assert torch.allclose(full_grad, cached_grad, rtol=0, atol=1e-10)
    if gate > 0:
        assert full_grad.abs().max() > 1e-6  # the comparison is not between two zeros
    # per-instance losses too (REPLUG and the signal check read them)
    assert torch.allclose(judge.instance_losses(inputs, plan), judge.instance_losses(inputs, plan, True), atol=1e-10)


def test_prefix_cache_refuses_a_trainable_judge():
    from dreambench.models.backbones import load_model
    from dreambench.models.lm import LanguageModel

    judge = LanguageModel(load_model("tiny-llama", workspace=None, causal_lm=True, seed=3).eval(), tiny_tokenizer(), "t")
    inputs, _, plan = judge_case(judge)
    with pytest.raises(ValueError, match="frozen judge"):
        judge.target_loss(inputs, plan, prefix_cache=True)


def test_judge_weights_stored_in_the_autocast_dtype_give_identical_loss_and_gradients():
    """bf16 autocast over fp32 weights vs the same weights stored in bf16, with the tied output head untied or
    not: bit-identical (tiny Llama)."""
    from dreambench.attention import use_kernel
    from dreambench.models.backbones import load_model, store_frozen_linears
    from dreambench.models.lm import LanguageModel

    def judge():
        model = load_model("tiny-llama", workspace=None, causal_lm=True, seed=3).eval()
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return LanguageModel(use_kernel(model), tiny_tokenizer(), "tiny-llama")

    results = []
    for store in (False, True, "untie"):
        j = judge()
        if store:
            converted = store_frozen_linears(j.causal_lm, torch.bfloat16, untie=store == "untie")
            # q, k, v, o, gate, up, down per layer; the tied output head only when untied
            assert converted == 7 * j.num_layers + (store == "untie")
            embedding, head = j.causal_lm.get_input_embeddings(), j.causal_lm.get_output_embeddings()
            assert embedding.weight.dtype == torch.float32
            assert (head.weight.dtype == torch.bfloat16) == (store == "untie")
            assert (head.weight is embedding.weight) == (store is True)
        inputs, scores, plan = judge_case(j, 0.7)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = j.target_loss(inputs, plan, prefix_cache=True)
        (grad,) = torch.autograd.grad(loss, scores)
        results.append((loss, grad))
    for loss, grad in results[1:]:
        assert torch.equal(results[0][0], loss) and torch.equal(results[0][1], grad)
    assert results[0][1].abs().max() > 0
    assert store_frozen_linears(judge().causal_lm, None) == 0  # full fp32: nothing converted


@pytest.mark.slow
def test_prefix_cached_judge_equals_the_full_pass_on_smollm2():
    """The real judge (SmolLM2-135M, fp32; the package's GGUF): equal to 1e-4 in loss and score gradients. In the
    project cache, where the other real-model tests find it too: dequantising takes ~35 s (transformers' GGUF
    reader), once for the whole run."""
    from dreambench.models.lm import LanguageModel
    from dreambench.workspace import PROJECT_ROOT, Workspace

    judge = LanguageModel.load("smollm2-135m-instruct", Workspace.resolve(cache_dir=PROJECT_ROOT / "cache")).eval()
    inputs, scores, plan = judge_case(judge, 0.5)
    full = judge.target_loss(inputs, plan)
    (full_grad,) = torch.autograd.grad(full, scores, retain_graph=True)
    cached = judge.target_loss(inputs, plan, prefix_cache=True)
    (cached_grad,) = torch.autograd.grad(cached, scores)
    assert abs(full.item() - cached.item()) < 1e-4
    assert torch.allclose(full_grad, cached_grad, rtol=1e-3, atol=1e-6)
    assert full_grad.abs().max() > 1e-6


def _frozen_tiny_judge(dtype=torch.bfloat16):
    """The tiny Llama judge as DREAM trains it: frozen, matmul weights stored in the autocast dtype."""
    from dreambench.attention import use_kernel
    from dreambench.models.backbones import load_model, store_frozen_linears
    from dreambench.models.lm import LanguageModel

    model = load_model("tiny-llama", workspace=None, causal_lm=True, seed=3).eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    store_frozen_linears(model, dtype)
    return LanguageModel(use_kernel(model), tiny_tokenizer(), "tiny-llama")


def _one_instance(judge, doc="The Arno crosses Florence."):
    """One training instance (DREAM's micro-batch) → (inputs, retriever scores with grad, injection plan)."""
    from dreambench.attention import InjectionPlan

    inputs = build_judge_inputs(
        judge.tokenizer, ["which river crosses the old town?"],
        [[doc, "A tower of stone stands by the sea wall.", "Bread is baked at dawn."]], [doc], 32, 16, 32,
    )  # fmt: skip
    scores = torch.tensor([[0.3, -1.2, 0.8]], requires_grad=True)
    pairs = [(judge.num_layers - 1, 0), (judge.num_layers // 2, 1), (1, 2)]
    plan = InjectionPlan(inputs.spans, torch.softmax(scores / 0.5, -1), torch.tensor(0.7),
                         InjectionPlan.heads_by_layer(pairs, torch.device("cpu")))  # fmt: skip
    return inputs, scores, plan


def test_prefix_store_reads_back_bit_for_bit_what_the_pass_computes(tmp_path):
    """bf16 autocast as in training: the loss and the score gradients are identical whether the prefix is
    computed (no store), computed and written (cold store) or read (warm store, also after reopening)."""
    from dreambench.models.prefix_store import PrefixStore

    judge = _frozen_tiny_judge()

    def run(store, doc="The Arno crosses Florence."):
        inputs, scores, plan = _one_instance(judge, doc)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = judge.target_loss(inputs, plan, True, store)
        (grad,) = torch.autograd.grad(loss, scores)
        return loss, grad

    def prefix_ids(doc="The Arno crosses Florence."):
        inputs = _one_instance(judge, doc)[0]
        return inputs.input_ids[:, : int(inputs.spans.query_index[:, 0].min())]

    store = PrefixStore(tmp_path / "store", 2**30)
    computed = run(None)
    cold = run(store)
    assert (store.writes, store.hits) == (1, 0) and store.path(prefix_ids()).is_file()
    warm = run(store)
    assert (store.writes, store.hits) == (1, 1)
    reopened = PrefixStore(tmp_path / "store", 2**30)
    assert reopened.bytes == store.bytes > 0
    again = run(reopened)
    assert reopened.hits == 1
    for loss, grad in (cold, warm, again):
        assert torch.equal(loss, computed[0]) and torch.equal(grad, computed[1])
    assert computed[1].abs().max() > 0  # the gradients compared are not all zero
    # other documents (another training set, another K) are computed, never read, and get a file of their own
    other = run(reopened, doc="Giotto designed the bell tower.")
    assert reopened.hits == 1 and not torch.equal(other[0], computed[0])
    assert store.path(prefix_ids("Giotto designed the bell tower.")).is_file() and store.path(prefix_ids()).is_file()
    # a store at its size limit writes nothing more; the step computes the prefix as without a store
    full = PrefixStore(tmp_path / "full", 1)
    assert torch.equal(run(full)[0], computed[0]) and full.writes == 0
    assert not list((tmp_path / "full").iterdir())


def test_prefix_store_changes_no_trained_weight_and_no_result_fingerprint(workspace):
    """DREAM trained three times on the smoke profile: writing the store, reading it, and without a store:
    bit-identical trained weights; the setting is not part of the result's fingerprint."""
    import shutil

    from dreambench.method import METHODS

    def train(**params):
        config = apply_overrides(SMOKE, {f"methods.dream.{k}": v for k, v in params.items()})
        method = METHODS.get("dream")(config, workspace)
        shutil.rmtree(method.checkpoint_dir(), ignore_errors=True)
        method.prepare()
        state = {k: v.clone() for k, v in method.trainable_modules().state_dict().items()}
        return method, state

    cold, cold_state = train()
    summary = cold.training_summary
    instances = SMOKE.train.steps * SMOKE.train.grad_accum
    assert summary["prefix_store_writes"] == instances and summary["prefix_store_hits"] == 0
    warm, warm_state = train()
    assert warm.training_summary["prefix_store_hits"] == instances
    off, off_state = train(prefix_store_gb=0)
    assert "prefix_store" not in off.training_summary
    assert cold_state.keys() == warm_state.keys() == off_state.keys()
    for name, tensor in cold_state.items():
        assert torch.equal(tensor, warm_state[name]) and torch.equal(tensor, off_state[name]), name
    assert cold.checkpoint_dir() == off.checkpoint_dir()  # same fingerprint: the results are shared
