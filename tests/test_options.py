"""Bad options and bad folders end in one message naming the option or folder and exit code 2, before any
work; options mean exactly what they say; a run that ran nothing does not exit 0."""

import threading

import pytest
from conftest import wait_until_waiting
from filelock import FileLock

from dreambench.cli import run_all
from dreambench.plan import plan_jobs
from dreambench.profiles import PROFILES
from dreambench.workspace import build_lock


def _args(workspace, *extra):
    return ["--profile", "smoke", "--data-dir", str(workspace.data_dir), "--cache-dir", str(workspace.cache_dir),
            "--results-dir", str(workspace.results_dir), "--reports-dir", str(workspace.reports_dir), *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods="], "--methods: empty value"),
        (["--datasets="], "--datasets: empty value"),
        (["--experiments", " , "], "--experiments: empty value"),
        (["--seeds", ","], "--seeds: empty value"),
        (["--set", "train.lr=inf"], "--set.train.lr: expected a finite number, got 'inf'"),
        (["--set", "methods.infonce.temperature=nan"], "expected a finite number, got 'nan'"),
        (["--set", "train.steps=inf"], "--set.train.steps: expected an integer, got 'inf'"),
    ],
)
def test_empty_or_non_finite_option_values_are_refused(extra, message, workspace, capsys):
    assert run_all.main(_args(workspace, *extra, "--dry-run")) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("error:") == 1


def test_seeds_means_exactly_those_seeds():
    smoke = PROFILES.get("smoke")
    jobs = plan_jobs(smoke, smoke.config, methods=["infonce", "bm25"], seeds=[1])
    assert [(j.experiment.method, j.experiment.name, j.config.train.seed) for j in jobs] == [
        ("bm25", "default", 0), ("infonce", "default@seed1", 1)]  # fmt: skip


@pytest.mark.parametrize("option", ["--results-dir", "--reports-dir", "--cache-dir"])
def test_a_folder_that_cannot_be_written_is_named_before_any_work(option, workspace, capsys):
    folder = {"--results-dir": workspace.results_dir, "--reports-dir": workspace.reports_dir,
              "--cache-dir": workspace.cache_dir}[option]  # fmt: skip
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where a folder belongs")  # (as root, a read-only folder is still writable)
    assert run_all.main(_args(workspace, "--methods", "bm25")) == 2
    err = capsys.readouterr().err
    assert f"{option} {folder}: cannot write there" in err and err.count("error:") == 1
    assert not any(workspace.results_dir.rglob("*.json")) if workspace.results_dir.is_dir() else True


def test_a_run_where_every_dataset_was_skipped_does_not_exit_0(workspace, capsys):
    # offline (the tests are), with no scifact folder: the dataset is skipped with a line saying where it looked
    assert run_all.main(_args(workspace, "--methods", "bm25", "--datasets", "scifact", "--no-signal-check")) == 1
    assert "nothing ran: every result of the plan was skipped" in capsys.readouterr().err


def test_a_killed_rendering_leaves_no_scratch_folder_behind(workspace, smoke_run):
    from dreambench.cli.reporting import render_report

    smoke_run("bm25")
    stale = workspace.reports_dir / ".smoke.rendering-killed"
    (stale / "smoke").mkdir(parents=True)
    render_report(PROFILES.get("smoke"), workspace)
    assert not stale.exists() and (workspace.reports_dir / "smoke" / "report.md").is_file()


def test_a_second_builder_waits_for_the_first_and_says_so(tmp_path, caplog):
    target = tmp_path / "training-data-abc"
    held = FileLock(str(tmp_path / f".{target.name}.lock"))
    held.acquire()
    built = []

    def second():
        with build_lock(target, "the training data"):
            built.append(target.exists())  # the first builder's work is visible once the lock is free

    thread = threading.Thread(target=second)
    thread.start()
    wait_until_waiting(caplog, "another process is building the training data", thread)
    assert not built  # waiting
    target.mkdir()
    held.release()
    thread.join(timeout=30)
    assert built == [True]
    assert "another process is building the training data" in caplog.text
