"""Several processes through ``torchrun`` on CPU (gloo), smoke profile: the same training, checkpoints that
resume under another process count, sharded encoding, and run_all.py end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dreambench.workspace import PROJECT_ROOT

WORKER = Path(__file__).with_name("distributed_worker.py")
# two processes sum the step's micro-batch gradients in another order than one: the last bits differ
WEIGHT_ATOL = 1e-5

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(PROJECT_ROOT))
    env.pop("WORLD_SIZE", None)
    return env


def launch(processes: int, *args: str, script: Path = WORKER) -> subprocess.CompletedProcess:
    if processes == 1:
        command = [sys.executable, str(script), *args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                   str(script), *args]  # fmt: skip
    done = subprocess.run(command, cwd=PROJECT_ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    # the launcher's traceback fills the tail; a rank's own error is the line that says why it stopped
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line or "Error:" in line]
    assert done.returncode == 0, "\n".join(errors[:20]) + "\n…\n" + done.stderr[-2000:]
    return done


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory) -> Path:
    """The worker's tasks in two launches, not one each (every launch pays ~10 s of imports and set-up): under two
    processes, a training run, the same run stopped after step 2 as a killed one would (its checkpoint on disk),
    sharded encoding and sharded judge likelihoods; then under one process the same tasks, and the stopped run
    resumed."""
    root = tmp_path_factory.mktemp("workers")
    cache = str(root / "cache")
    launch(2, "train", cache, str(root / "two"), "0", str(root / "two.pt"),
           "+", "train", cache, str(root / "resumed"), "2", str(root / "half.pt"),
           "+", "encode", cache, str(root / "encode-two.pt"),
           "+", "likelihoods", str(root / "likelihoods-two"), str(root / "likelihoods-two.pt"))  # fmt: skip
    assert json.loads((root / "resumed" / "train_log.jsonl").read_text().splitlines()[-1])["step"] == 2
    launch(1, "train", cache, str(root / "one"), "0", str(root / "one.pt"),
           "+", "train", cache, str(root / "resumed"), "0", str(root / "resumed.pt"),
           "+", "encode", cache, str(root / "encode-one.pt"),
           "+", "likelihoods", str(root / "likelihoods-one"), str(root / "likelihoods-one.pt"))  # fmt: skip
    return root


def test_two_processes_train_like_one_and_resume_under_one(worker_runs):
    one, two = torch.load(worker_runs / "one.pt"), torch.load(worker_runs / "two.pt")
    half, resumed = torch.load(worker_runs / "half.pt"), torch.load(worker_runs / "resumed.pt")
    moved = _same_weights(one, half)  # what steps 3 and 4 changed
    print(f"one vs two {_same_weights(one, two):.2e}, one vs resumed {_same_weights(one, resumed):.2e}, "
          f"steps 3-4 moved {moved:.2e}")
    assert _same_weights(one, two) < WEIGHT_ATOL
    assert _same_weights(one, resumed) < WEIGHT_ATOL
    assert moved > 100 * WEIGHT_ATOL
    logs = [[json.loads(line) for line in (worker_runs / run / "train_log.jsonl").read_text().splitlines()]
            for run in ("one", "two", "resumed")]  # fmt: skip
    assert [r["step"] for r in logs[1]] == [r["step"] for r in logs[0]] == [r["step"] for r in logs[2]]
    for a, b in zip(logs[0], logs[1], strict=True):  # the logged loss is the global batch's, on rank 0
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["tokens_per_s"] > 0 and b["tokens_per_s"] > 0


def test_sharded_encoding_equals_one_process(worker_runs):
    one, two = torch.load(worker_runs / "encode-one.pt"), torch.load(worker_runs / "encode-two.pt")
    assert torch.equal(one["embeddings"], two["embeddings"])  # the same batches: bit-identical
    assert one["tokens"] == two["tokens"] > 0
    assert one["truncated"] == two["truncated"] > 0  # texts cut to the length cap, counted over the ranks
    assert one["embeddings"].abs().sum(dim=1).min() > 0  # every row was filled by some rank


def test_sharded_judge_likelihoods_equal_one_process_and_fill_one_cache(worker_runs):
    one, two = torch.load(worker_runs / "likelihoods-one.pt"), torch.load(worker_runs / "likelihoods-two.pt")
    assert one["likelihoods"] == two["likelihoods"] and len(one["likelihoods"]) == 8  # every instance, same ℓ
    lines = Path(two["cache"]).read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(one["likelihoods"])  # each once


def test_the_worker_splits_its_tasks_at_plus_signs():
    sys.path.insert(0, str(WORKER.parent))
    try:
        from distributed_worker import tasks
    finally:
        sys.path.remove(str(WORKER.parent))
    assert tasks(["encode", "c", "r.pt", "+", "train", "c", "o", "2", "h.pt"]) == [
        ["encode", "c", "r.pt"], ["train", "c", "o", "2", "h.pt"]]  # fmt: skip


def test_run_all_under_torchrun_gives_the_single_process_results(tmp_path):
    """The whole pipeline (train, encode, search, score, write, render) under two processes."""
    runs = {}
    for processes in (1, 2):
        root = tmp_path / f"p{processes}"
        launch(processes, "--profile", "smoke", "--methods", "infonce", "--no-signal-check", "--seeds", "0",
               "--set", "train.grad_accum=4", "--cache-dir", str(root / "cache"), "--results-dir",
               str(root / "results"), "--reports-dir", str(root / "reports"), script=PROJECT_ROOT / "run_all.py")  # fmt: skip
        (result,) = (root / "results").rglob("wiki-desc2lead.json")
        runs[processes] = json.loads(result.read_text())
        assert (root / "reports" / "smoke" / "report.md").is_file()
    one, two = runs[1], runs[2]
    assert two["scores"]["ndcg_at_10"] == pytest.approx(one["scores"]["ndcg_at_10"], abs=1e-4)
    assert two["scores"]["ndcg_at_10"] > 0
    assert one["training"]["heldout_after"]["mrr"] == pytest.approx(two["training"]["heldout_after"]["mrr"], abs=1e-4)
    assert one["training"]["final_loss"] == pytest.approx(two["training"]["final_loss"], rel=1e-5)


def test_grad_accum_that_does_not_split_over_the_processes_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(PROJECT_ROOT / "run_all.py"), "--profile", "smoke", "--methods", "infonce", "--no-signal-check",
         "--set", "train.grad_accum=3", "--cache-dir", str(tmp_path / "cache"), "--results-dir",
         str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports")],
        cwd=PROJECT_ROOT, env=_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode != 0
    assert "train.grad_accum = 3" in done.stderr and "2 processes" in done.stderr
    assert not list((tmp_path / "results").rglob("*.json"))
