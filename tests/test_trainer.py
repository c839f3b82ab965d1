"""The trainer core: schedules, checkpoints, kill-and-resume equivalence, frozen judge, config errors."""

import json

import pytest
import torch

from dreambench.config import TrainConfig, apply_overrides
from dreambench.data.training import load_training_data
from dreambench.method import METHODS
from dreambench.profiles import PROFILES
from dreambench.training.trainer import (
    CHECKPOINT,
    LOG,
    TENSORBOARD,
    Trainer,
    lr_factor,
    seed_everything,
    tensorboard_writer,
    trainable_state,
)

SMOKE = apply_overrides(PROFILES.get("smoke").config, {"methods.dream.num_heads": 3, "train.steps": 4})


def test_lr_schedules():
    cfg = TrainConfig(steps=10, warmup_steps=2, schedule="linear")
    assert [lr_factor(s, cfg) for s in (0, 1)] == [0.5, 1.0]
    assert lr_factor(2, cfg) == 1.0 and lr_factor(6, cfg) == pytest.approx(0.5) and lr_factor(10, cfg) == 0.0
    cosine = TrainConfig(steps=10, warmup_steps=0, schedule="cosine")
    assert lr_factor(0, cosine) == 1.0 and lr_factor(5, cosine) == pytest.approx(0.5)
    assert lr_factor(7, TrainConfig(steps=10, warmup_steps=2, schedule="constant")) == 1.0


class Killed(Exception):
    pass


def dream(workspace, config=SMOKE):
    method = METHODS.get("dream")(config, workspace)
    data = load_training_data(config, workspace)
    seed_everything(config.train.seed)  # as TrainedDenseMethod.prepare does
    method.build(data)
    return method, method.training_loader(data.train)


def trainer(method, out_dir, config=SMOKE):
    return Trainer(method, config.train, out_dir, {"profile": "smoke"}, "fp-test")


def test_kill_and_resume_equals_an_uninterrupted_run(workspace, tmp_path):
    method, loader = dream(workspace)
    trainer(method, tmp_path / "straight").fit(loader)
    expected = trainable_state(method.trainable_modules())

    method, loader = dream(workspace)

    def kill_after_three(step):
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        trainer(method, tmp_path / "killed").fit(loader, on_step=kill_after_three)
    assert torch.load(tmp_path / "killed" / CHECKPOINT, weights_only=False)["step"] == 2  # checkpoint_every=2

    method, loader = dream(workspace)  # a fresh process: weights back at their initial values
    trainer(method, tmp_path / "killed").fit(loader)
    resumed = trainable_state(method.trainable_modules())
    assert set(resumed) == set(expected)
    for name, value in expected.items():
        assert torch.allclose(resumed[name], value, atol=1e-6), name
    steps = [json.loads(line)["step"] for line in (tmp_path / "killed" / LOG).read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # step 3 was redone and logged once
    record = json.loads((tmp_path / "killed" / LOG).read_text().splitlines()[-1])
    for key in ("loss", "lr", "grad_norm", "tokens_per_s", "gate", "tau"):
        assert key in record
    # the same curves as TensorBoard events, a resumed run's replacing what followed its checkpoint
    logged = {json.loads(line)["step"]: json.loads(line)["loss"]
              for line in (tmp_path / "killed" / LOG).read_text().splitlines()}  # fmt: skip
    for folder in ("straight", "killed"):
        scalars = tensorboard_scalars(tmp_path / folder / TENSORBOARD)
        assert sorted(scalars["dream/loss"]) == [1, 2, 3, 4] and "dream/tau" in scalars
    for step, loss in tensorboard_scalars(tmp_path / "killed" / TENSORBOARD)["dream/loss"].items():
        assert loss == pytest.approx(logged[step], rel=1e-6)


def tensorboard_scalars(folder):
    """{tag: {step: value}} as TensorBoard shows a folder's event files: in writing order, a session start at
    step s (a writer's ``purge_step``) drops every earlier event at step ≥ s. TFRecord framing: a uint64 length,
    its CRC, the serialised Event, its CRC."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    files = sorted(folder.glob("events.out.tfevents.*"))  # by name, as TensorBoard reads them: in writing order
    assert files, f"no event files in {folder}"
    for path in files:
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event.session_log.START:
                for steps in scalars.values():
                    for step in [s for s in steps if s >= event.step]:
                        del steps[step]
            for value in event.summary.value:
                assert event.step not in scalars.get(value.tag, {}), f"{value.tag} logged twice at {event.step}"
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def test_judge_stays_frozen_and_the_retriever_learns(workspace, tmp_path):
    method, loader = dream(workspace)
    judge_before = {n: p.detach().clone() for n, p in method.judge.named_parameters()}
    lora_before = trainable_state(method.trainable_modules())
    trainer(method, tmp_path / "run").fit(loader)
    for name, p in method.judge.named_parameters():
        assert p.grad is None and not p.requires_grad and torch.equal(p, judge_before[name]), name
    lora_after = trainable_state(method.trainable_modules())
    changed = [n for n in lora_before if not torch.equal(lora_before[n], lora_after[n])]
    assert any("lora_B" in n for n in changed) and "log_tau" in changed and "gamma" in changed


def test_judge_lora_ablation_trains_the_judge_adapters(workspace, tmp_path):
    config = apply_overrides(SMOKE, {"methods.dream.judge_lora": True, "train.steps": 2})
    method, loader = dream(workspace, config)
    names = list(trainable_state(method.trainable_modules()))
    assert any(n.startswith("judge.") and "lora_" in n for n in names)
    trainer(method, tmp_path / "run", config).fit(loader)


def test_mismatched_checkpoint_is_refused(workspace, tmp_path):
    method, loader = dream(workspace)
    trainer(method, tmp_path / "run").fit(loader)
    other = Trainer(method, SMOKE.train, tmp_path / "run", {}, "another-fingerprint")
    with pytest.raises(ValueError, match="different training configuration"):
        other.fit(loader)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"train.warmup_steps": 9}, "warmup_steps"),
        ({"train.schedule": "step"}, "schedule"),
        ({"train.steps": 0}, "steps"),
    ],
)
def test_impossible_training_configs(workspace, tmp_path, override, message):
    config = apply_overrides(SMOKE, override)
    with pytest.raises(ValueError, match=message):
        Trainer(None, config.train, tmp_path, {}, "x")


def test_non_finite_loss_stops_training_naming_step_instances_and_checkpoint(
    workspace, tmp_path, monkeypatch
):
    from dreambench.training.trainer import TrainingDiverged

    method, loader = dream(workspace)
    real = method.compute_loss
    seen = []

    def poisoned(batch):
        seen.append(batch.instance_ids)
        loss, stats = real(batch)
        return (loss * float("nan"), stats) if len(seen) > 4 else (loss, stats)  # step 3's first micro-batch

    monkeypatch.setattr(method, "compute_loss", poisoned)
    with pytest.raises(TrainingDiverged) as info:
        trainer(method, tmp_path / "run").fit(loader)
    message = str(info.value)
    assert "non-finite loss nan at step 3" in message and str(seen[-1]) in message
    assert f"last good checkpoint {tmp_path / 'run' / CHECKPOINT} (step 2)" in message
    assert (
        torch.load(tmp_path / "run" / CHECKPOINT, weights_only=False)["step"] == 2
    )  # the bad step never saved


def test_event_writers_opened_within_one_second_keep_separate_files(tmp_path, monkeypatch):
    """tensorboardX names a file by the second it opened; a resumed run that starts within that second must not
    truncate the interrupted run's events."""
    from tensorboardX import event_file_writer

    monkeypatch.setattr(event_file_writer.time, "time", lambda: 1_700_000_000.0)
    for step, value in ((0, 1.0), (2, 2.0)):
        writer = tensorboard_writer(tmp_path, step)
        writer.add_scalar("loss", value, step + 1)
        writer.close()
    assert len(list((tmp_path / TENSORBOARD).glob("events.out.tfevents.*"))) == 2
    assert tensorboard_scalars(tmp_path / TENSORBOARD)["loss"] == {1: 1.0, 3: 2.0}
