"""``run_all.py --tune``: the same coordinate search for every trained method, on held-out instances only."""

import json

import pytest

import run_all
from dreambench.config import apply_overrides
from dreambench.method import METHODS
from dreambench.profiles import PROFILES
from dreambench.report.runs import profile_values
from dreambench.results import load_stage_records, load_tuning
from dreambench.search_basis import SELECTION, select, standard_error


def _args(workspace):
    return ["--profile", "smoke", "--data-dir", str(workspace.data_dir), "--results-dir", str(workspace.results_dir),
            "--cache-dir", str(workspace.cache_dir), "--reports-dir", str(workspace.reports_dir)]  # fmt: skip


def test_tuning_trains_every_grid_point_and_keeps_the_rules_choice(workspace, capsys):
    grid = PROFILES.get("smoke").tuning["infonce"]
    # --dry-run describes the search and trains nothing: only the first axis's points are known in advance
    assert run_all.main([*_args(workspace), "--tune", "--dry-run", "--methods", "infonce"]) == 0
    out = capsys.readouterr().out
    assert out.count(" trains first -> ") == len(grid[0][1]) and "their points depend on this axis's choice" in out
    assert not (workspace.cache_dir / "checkpoints").exists() and not load_tuning(workspace.results_dir, "smoke")

    assert run_all.main([*_args(workspace), "--tune", "--methods", "infonce"]) == 0
    record = load_tuning(workspace.results_dir, "smoke")["infonce"]
    # its wall time is the report's *tuning* stage, counting every run it trained (each distinct configuration once)
    stage = [r for r in load_stage_records(workspace.results_dir, "smoke") if r["stage"] == "tuning"]
    trained = len(list((workspace.cache_dir / "checkpoints" / "smoke").glob("infonce-*/final.pt")))
    assert len(stage) == 1 and stage[0]["finished"] and stage[0]["outcomes"] == {"computed": trained} and trained > 1
    assert record["complete"] and [p["axis"] for p in record["points"]] == [k for k, vs in grid for _ in vs]
    from dreambench.search_basis import tuning_basis

    assert record["basis"] == tuning_basis(PROFILES.get("smoke").config, "infonce", [k for k, _ in grid])
    # each run says where it ran: precision auto is bf16 autocast only on a CPU with native bf16
    assert all({"cpu_capability", "cpu_bf16"} <= set(r["machine"]) for p in record["points"] for r in p["seeds"])
    chosen = {}
    for key, values in grid:  # coordinate search: each axis picks its best point given the earlier choices
        points = [p for p in record["points"] if p["axis"] == key]
        assert [p["value"] for p in points] == list(values)
        assert all(p["overrides"] == {**chosen, key: p["value"]} for p in points)
        assert all(0 < p["heldout_mrr"] <= 1 and p["final_loss"] is not None for p in points)
        chosen[key] = select(points)["value"]
    assert record["chosen"] == chosen
    # the evaluation sets were never touched: no result file exists, only the tuning record
    assert not list((workspace.results_dir / "smoke").glob("infonce/*/*.json"))
    assert "infonce: chose" in capsys.readouterr().out
    assert run_all.main([*_args(workspace), "--tune", "--dry-run", "--methods", "infonce"]) == 0
    assert capsys.readouterr().out.count(" done: held-out MRR ") == sum(len(vs) for _, vs in grid)

    # a second search is served from the trained checkpoints (resumable, nothing retrained)
    before = {p.parent.name: p.stat().st_mtime_ns for p in (workspace.cache_dir / "checkpoints" / "smoke").glob("*/final.pt")}
    assert run_all.main([*_args(workspace), "--tune", "--methods", "infonce"]) == 0
    after = {p.parent.name: p.stat().st_mtime_ns for p in (workspace.cache_dir / "checkpoints" / "smoke").glob("*/final.pt")}
    assert before == after and len(before) >= 2
    assert len([r for r in load_stage_records(workspace.results_dir, "smoke") if r["stage"] == "tuning"]) == 1
    assert json.loads((workspace.results_dir / "smoke" / "tuning" / "infonce.json").read_text())["chosen"] == chosen

    # with results to show, the report's Tuning section lists every point and says the profile is not tuned
    assert run_all.main([*_args(workspace), "--methods", "bm25", "--no-signal-check"]) == 0
    report = (workspace.reports_dir / "smoke" / "report.md").read_text()
    assert "## Tuning" in report and "the main table does not use the search's choice" in report
    assert ("not tuned yet (run at the profile's values): dream; search with "
            "`python run_all.py --profile smoke --tune --methods dream`") in report
    assert "searched on (the last invocation to write each record): " in report


def test_a_bad_grid_fails_before_any_training(workspace, capsys):
    assert run_all.main([*_args(workspace), "--tune", "--methods", "bm25"]) == 2
    assert "declares no tuning grid for 'bm25'" in capsys.readouterr().err
    assert run_all.main([*_args(workspace), "--tune", "--methods", "infonce", "--set", "train.steps=0"]) == 2
    assert "train.steps = 0" in capsys.readouterr().err
    assert not (workspace.cache_dir / "checkpoints").exists()
    # a value past the grid is checked with the grid's, and a key past the grids names no axis
    import dataclasses

    from dreambench.tuning import check_grid

    profile = _two_rate_profile()
    for beyond, message in (({"train.lr": (-1.0,)}, "train.lr"), ({"train.steps": (5,)}, "'train.steps', an axis")):
        with pytest.raises(ValueError, match=message):
            check_grid(dataclasses.replace(profile, tuning_beyond=beyond), profile.config, ["infonce"], workspace)


TRAINED = [n for n, cls in METHODS.items() if cls.main_table and cls.trainable]


@pytest.mark.parametrize("profile", ["mini", "gpu", "paper"])
def test_every_searched_method_gets_the_same_learning_rate_axis_first(profile):
    """Every trained main-table method the profile does not leave out is searched, each on the same
    learning-rate axis first; a method the profile leaves out is not searched."""
    p = PROFILES.get(profile)
    grids = p.tuning
    assert set(grids) == {m for m in TRAINED if m not in p.left_out}
    assert not set(grids) & set(p.left_out)
    first = grids[next(iter(grids))][0]
    assert first[0] == "train.lr" and all(grid[0] == first for grid in grids.values())


def test_an_incomplete_search_says_how_far_it_got_and_what_the_main_table_uses(tmp_path):
    from dreambench.report import tuning_section

    point = {"axis": "train.lr", "value": 3e-4, "overrides": {"train.lr": 3e-4}, "heldout_mrr": 0.42,
             "heldout_top1": 0.18, "first_loss": 10.3, "final_loss": 5.9, "train_seconds": 60.0}  # fmt: skip
    folder = tmp_path / "mini" / "tuning"
    folder.mkdir(parents=True)
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": False, "points": [point]}))
    (folder / "revela.json").write_text(json.dumps({"method": "revela", "complete": False, "points": [point]}))
    table, lines = tuning_section(tmp_path, "mini")
    assert len(table) == 2 and table["chosen"].tolist() == ["", ""]
    # what the main table runs at: the committed choice, else the profile's own learning rate (never "{}")
    lr = profile_values(PROFILES.get("mini"), "infonce", ["train.lr"])["train.lr"]
    assert lines[0] == (f"- infonce: search incomplete (1 point so far; the main table runs at the profile's values "
                        f"{ {'train.lr': lr} }; resume with `python run_all.py --profile mini --tune --methods "
                        "infonce`; a run "
                        "this record or its runs file holds is not trained again, one whose checkpoint is in the cache "
                        "is loaded, any other is trained).")  # fmt: skip
    # a stored search of a method the profile leaves out gives no resume command that would fail
    assert lines[1] == ("- revela: a stored search, but profile mini does not search revela (1 point(s) shown; its "
                        "main table does not run it).")
    assert lines[2].startswith("- not tuned yet (run at the profile's values): ")
    assert "dream" in lines[2] and "infonce" not in lines[2].split(";")[0]
    # a complete search that chose the profile's own value agrees with the profile, committed values or none
    def at(value):  # the point it chose, and a larger rate scoring lower (so mini adds no rate beyond the grid)
        return [{**point, "value": value, "overrides": {"train.lr": value}},
                {**point, "value": 1.0, "overrides": {"train.lr": 1.0}, "heldout_mrr": 0.1}]  # fmt: skip

    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": True, "points": at(lr),
                                                     "chosen": {"train.lr": lr}, "selection": SELECTION}))  # fmt: skip
    agreed = tuning_section(tmp_path, "mini")[1][0]
    assert agreed == f"- infonce: chose {{'train.lr': {lr}}}; the profile uses these values."
    # a choice another selection rule made (the best mean alone: 1e-3 by 0.015, within its error of 0.054) chooses
    # nothing and marks no point until --tune re-chooses from the recorded runs
    noisy = [{**_point(value, *mrrs), "axis": "train.lr", "overrides": {"train.lr": value}}
             for value, mrrs in ((3e-4, (0.60, 0.62)), (1e-3, (0.55, 0.70)))]  # fmt: skip
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": True, "points": noisy,
                                                     "chosen": {"train.lr": 1e-3}, "selection": "best mean"}))  # fmt: skip
    from dreambench.report import searched_values

    table, lines = tuning_section(tmp_path, "mini")
    assert lines[0].startswith("- infonce: chose {'train.lr': 0.001} by another selection rule ('best mean'; the "
                               "current rule keeps {'train.lr': 0.0003}), so it chooses nothing")  # fmt: skip
    assert table["chosen"].tolist()[:2] == ["", ""] and searched_values(tmp_path, "mini") == {}
    assert table["MRR se"].tolist()[:2] == [pytest.approx(table["MRR se"].iloc[0])] * 2  # one error an axis
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": True, "points": at(lr),
                                                     "chosen": {"train.lr": lr}, "selection": SELECTION}))  # fmt: skip
    # what the claims call "searched values": a complete, current search whose choice the profile runs at
    assert searched_values(tmp_path, "mini") == {"infonce": {"train.lr": lr}}
    other = 1e-4 if lr != 1e-4 else 1e-3
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": True, "points": at(other),
                                                     "chosen": {"train.lr": other}, "selection": SELECTION}))  # fmt: skip
    assert tuning_section(tmp_path, "mini")[1][0].startswith(
        f"- infonce: chose {{'train.lr': {other}}}, but the profile runs at {{'train.lr': {lr}}}: the main table "
        "does not")
    assert searched_values(tmp_path, "mini") == {}  # the main table does not run at the choice


def _two_rate_profile():
    import dataclasses

    return dataclasses.replace(PROFILES.get("smoke"), tuning={"infonce": (("train.lr", (3e-4, 1e-3)),)},
                               tuning_seeds=(0, 1))  # fmt: skip


def _two_rate_search(workspace, monkeypatch, mrr, trained=None):
    """A search over lr 3e-4 and 1e-3 at seeds 0 and 1 whose runs score ``mrr[lr, seed]`` (nothing trains)."""
    from dreambench import tuning

    def fake(method, config, ws):
        if trained is not None:
            trained.append((config.train.lr, config.train.seed))
        return {"checkpoint": f"{config.train.lr:g}-{config.train.seed}",
                "heldout_mrr": mrr[config.train.lr, config.train.seed], "train_seconds": 30.0}  # fmt: skip

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    profile = _two_rate_profile()
    return tuning.tune(profile, profile.config, "infonce", workspace)


def test_each_point_trains_at_every_tuning_seed_and_the_mean_decides(workspace, monkeypatch):
    """Seed 0 alone would pick lr 1e-3 (0.70 against 0.60); the mean over seeds 0 and 1 picks 3e-4 (0.60 against
    0.45), and the main table's runs at those seeds are the chosen point's runs."""
    from dreambench import tuning
    from dreambench.report import tuning_section

    mrr = {(3e-4, 0): 0.60, (3e-4, 1): 0.60, (1e-3, 0): 0.70, (1e-3, 1): 0.20}
    trained = []
    record = _two_rate_search(workspace, monkeypatch, mrr, trained)
    assert trained == [(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)]
    assert record["chosen"] == {"train.lr": 3e-4} and record["seeds"] == [0, 1]
    first, second = record["points"]
    assert first["heldout_mrr"] == pytest.approx(0.60) and second["heldout_mrr"] == pytest.approx(0.45)
    assert [r["seed"] for r in second["seeds"]] == [0, 1] and second["train_seconds"] == 60.0
    table, _ = tuning_section(workspace.results_dir, "smoke")
    # smoke trains in fp32 (an explicit precision): each run is labelled with it, whatever the CPU
    assert table["MRR per seed"].tolist() == ["0: 0.600 fp32 / 1: 0.600 fp32", "0: 0.700 fp32 / 1: 0.200 fp32"]
    config = _two_rate_profile().config
    assert tuning.tuning_seeds(PROFILES.get("smoke"), config) == (config.train.seed,)


def _point(value, *mrrs):
    return {"value": value, "heldout_mrr": sum(mrrs) / len(mrrs),
            "seeds": [{"seed": seed, "heldout_mrr": m} for seed, m in enumerate(mrrs)]}


def test_an_axis_keeps_its_earliest_value_within_one_standard_error_of_the_best():
    """The one-standard-error rule: a larger learning rate is kept only where it beats the smaller by more than the
    seed noise, pooled over the axis's points (the mini searches' numbers: InfoNCE's 1e-3 led 3e-4 by 0.005, its
    seeds up to 0.063 apart; Drama's led by 0.133, its seeds at most 0.011 apart)."""
    infonce = [_point(1e-4, 0.6594, 0.6480), _point(3e-4, 0.7004, 0.7517), _point(1e-3, 0.6998, 0.7631)]
    pooled = ((0.6594 - 0.6480) ** 2 + (0.7517 - 0.7004) ** 2 + (0.7631 - 0.6998) ** 2) / 2 / 3  # 3 dof
    assert standard_error(infonce, 2) == pytest.approx((pooled / 2) ** 0.5)
    assert select(infonce)["value"] == 3e-4
    drama = [_point(1e-4, 0.5462, 0.5395), _point(3e-4, 0.6298, 0.6370), _point(1e-3, 0.7720, 0.7608)]
    assert select(drama)["value"] == 1e-3
    # REPLUG's: 1e-3's own two seeds agree to 0.0005 by chance, which alone would allow it no error and keep it by
    # 0.002; pooled over the axis (3 dof) the error is 0.0035 and 3e-4 is kept
    replug = [_point(1e-4, 0.6702, 0.6741), _point(3e-4, 0.7677, 0.7793), _point(1e-3, 0.7751, 0.7756)]
    assert select(replug)["value"] == 3e-4 and select(replug[2:])["value"] == 1e-3
    # the order of the grid decides among points within the error, not their scores: the earliest such is kept
    assert select([_point(1, 0.50, 0.70), _point(2, 0.62, 0.62), _point(3, 0.55, 0.75)])["value"] == 1
    best = _point(2, 0.5, 0.9)
    floor = best["heldout_mrr"] - standard_error([best], 2)  # at the floor an earlier point is kept, not below
    assert select([_point(1, floor), best])["value"] == 1
    assert select([_point(1, floor - 1e-9), best])["value"] == 2
    # a seed without a finite score gives no error (and no crash); a point without a finite mean is passed over
    assert standard_error([_point(1, 0.5, float("nan"))], 2) is None
    assert standard_error([_point(1, 0.5)], 1) is None
    assert select([{"value": 1, "heldout_mrr": float("nan"), "seeds": []}, _point(2, 0.4)])["value"] == 2
    # one seed: no error to allow, the best point, ties to the earlier; a point without a score is passed over
    assert select([_point(1, 0.6), _point(2, 0.61), _point(3, 0.61)])["value"] == 2
    assert select([{"value": 1, "heldout_mrr": None, "seeds": []}, _point(2, 0.4)])["value"] == 2
    assert select([{"value": 1, "heldout_mrr": None, "seeds": []}]) is None


def test_a_search_keeps_the_smaller_rate_where_the_larger_wins_by_less_than_its_seed_noise(workspace, monkeypatch):
    """The best mean (1e-3: 0.625 against 0.61) is within its standard error (0.054, pooled over the axis) of
    3e-4's: the search keeps 3e-4, and --tune --dry-run and the report say the same."""

    from dreambench import tuning
    from dreambench.report import tuning_section

    mrr = {(3e-4, 0): 0.60, (3e-4, 1): 0.62, (1e-3, 0): 0.55, (1e-3, 1): 0.70}
    record = _two_rate_search(workspace, monkeypatch, mrr)
    profile = _two_rate_profile()
    first, second = record["points"]
    assert record["chosen"] == {"train.lr": 3e-4} and second["heldout_mrr"] > first["heldout_mrr"]
    lines = tuning.describe(profile, profile.config, "infonce", workspace)
    assert sum(" done: held-out MRR " in line for line in lines) == 2
    table, notes = tuning_section(workspace.results_dir, "smoke")
    se = ((((0.62 - 0.60) ** 2 + (0.70 - 0.55) ** 2) / 2 / 2) / 2) ** 0.5  # pooled over the axis: 2 dof, 2 seeds
    assert table["chosen"].tolist() == ["✔", ""] and table["MRR se"].tolist() == [pytest.approx(se)] * 2


def test_a_resumed_search_takes_recorded_runs_and_trains_only_the_rest(workspace, monkeypatch):
    """Each seed's run is written to the runs file as it finishes; a search resumed without checkpoints (another
    machine, a fresh clone with the committed records) takes those runs and trains only what they lack."""
    import dataclasses

    from dreambench import tuning

    trained, stop_at = [], [3]

    class Stopped(Exception):
        pass

    def fake(method, config, ws):
        trained.append((config.train.lr, config.train.seed))
        if len(trained) in stop_at:
            raise Stopped  # the session stops during the third run
        name = METHODS.get(method)(config, ws, "tune").checkpoint_dir().name
        return {"checkpoint": name, "heldout_mrr": 0.5 + config.train.lr, "train_seconds": 30.0}

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    profile = dataclasses.replace(PROFILES.get("smoke"), tuning={"infonce": (("train.lr", (3e-4, 1e-3)),)},
                                  tuning_seeds=(0, 1))  # fmt: skip
    with pytest.raises(Stopped):
        tuning.tune(profile, profile.config, "infonce", workspace)
    stop_at.clear()
    path = tuning.tuning_path(workspace.results_dir, "smoke", "infonce")
    assert len(json.loads(tuning.runs_path(path).read_text())) == 2  # both seeds of the first point
    path.unlink()  # only the runs file is left (the record of the finished point is gone too)
    lines = tuning.describe(profile, profile.config, "infonce", workspace)  # --tune --dry-run says so
    assert sum("recorded, held-out MRR 0.5003 (not trained again)" in line for line in lines) == 2
    assert sum(" trains first -> " in line for line in lines) == 2 and not trained[3:]
    trained.clear()
    record = tuning.tune(profile, profile.config, "infonce", workspace)
    assert trained == [(1e-3, 0), (1e-3, 1)]  # the first point's two runs came from the runs file
    assert record["chosen"] == {"train.lr": 1e-3}
    assert [r["heldout_mrr"] for r in record["points"][0]["seeds"]] == [pytest.approx(0.5003)] * 2
    assert [r.get("reused") for p in record["points"] for r in p["seeds"]] == [True, True, None, None]
    # a recorded run on other training data (another construction version, say) is trained again
    runs = json.loads(tuning.runs_path(path).read_text())
    for run in runs.values():
        run["training_data"] = "other-data"
    tuning.runs_path(path).write_text(json.dumps(runs))
    path.unlink()
    trained.clear()
    tuning.tune(profile, profile.config, "infonce", workspace)
    assert trained == [(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)]
    # the same configuration, but the data rebuilt elsewhere read other instances (their sha256): trained again
    from dreambench.data.training import load_training_data

    built = load_training_data(profile.config, workspace).sha256
    runs = json.loads(tuning.runs_path(path).read_text())
    assert all(run["training_data"] != "other-data" for run in runs.values())
    for sha, expect in ((built, []), ("0" * 64, [(3e-4, 0), (3e-4, 1), (1e-3, 0), (1e-3, 1)])):
        tuning.runs_path(path).write_text(json.dumps({k: {**r, "training_data_sha256": sha} for k, r in runs.items()}))
        path.unlink()
        lines = "\n".join(tuning.describe(profile, profile.config, "infonce", workspace))  # --tune --dry-run
        assert lines.count("(not trained again)") == (4 if sha == built else 0)
        assert lines.count("recorded on other instances (sha256 000000000000)") == (0 if sha == built else 4)
        trained.clear()
        tuning.tune(profile, profile.config, "infonce", workspace)
        assert trained == expect


def test_the_tuning_section_says_whether_every_search_run_read_the_same_instances(tmp_path):
    from dreambench.report import tuning_section

    folder = tmp_path / "mini" / "tuning"
    folder.mkdir(parents=True)

    def write(*shas):
        seeds = [{"seed": n, "heldout_mrr": 0.5, "training_data_sha256": sha} for n, sha in enumerate(shas)]
        point = {"axis": "train.lr", "value": 3e-4, "overrides": {"train.lr": 3e-4}, "seeds": seeds}
        (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": False, "points": [point]}))
        return tuning_section(tmp_path, "mini")[1]

    same = "- every search run that recorded its instances read the same ones (sha256 `aaaaaaaaaaaa`"
    assert f"{same}; the main" in "\n".join(write("a" * 64, "a" * 64))
    assert f"{same}; 1 earlier run(s) recorded no sha256;" in "\n".join(write("a" * 64, None))
    assert "read 2 different builds of the training data** (aaaaaaaaaaaa, bbbbbbbbbbbb)" in "\n".join(
        write("a" * 64, "b" * 64)
    )
    assert not any("sha256" in line or "builds" in line for line in write(None, None))  # records from before


def test_the_tuning_section_marks_each_run_with_the_precision_it_trained_at(tmp_path):
    """Precision auto is bf16 autocast on a CPU with native bf16 and fp32 elsewhere, so a search resumed on
    another kind of machine mixes them: each run that recorded its machine is marked, and a mix is named."""
    from dreambench.report import tuning_section

    folder = tmp_path / "mini" / "tuning"
    folder.mkdir(parents=True)

    def write(*natives):
        seeds = [{"seed": n, "heldout_mrr": 0.5, **({} if native is None else {"machine": {"cpu_bf16": native}})}
                 for n, native in enumerate(natives)]  # fmt: skip
        point = {"axis": "train.lr", "value": 3e-4, "overrides": {"train.lr": 3e-4}, "seeds": seeds}
        (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": False, "points": [point]}))
        table, lines = tuning_section(tmp_path, "mini")
        return table["MRR per seed"].iloc[0], "\n".join(lines)

    per_seed, lines = write(True, False)
    assert per_seed == "0: 0.500 bf16 / 1: 0.500 fp32" and "this search mixes both" in lines
    per_seed, lines = write(False, None)  # the earlier run recorded no machine: unmarked, and no mix claimed
    assert per_seed == "0: 0.500 fp32 / 1: 0.500" and "marks each run" in lines and "mixes" not in lines
    per_seed, lines = write(None, None)
    assert per_seed == "0: 0.500 / 1: 0.500" and "marks each run" not in lines and "`carried`" not in lines
    # a search that trained in fp32 is fp32 whatever the CPU: no bf16 label, no mix
    point = {"axis": "train.lr", "value": 3e-4, "overrides": {"train.lr": 3e-4},
             "seeds": [{"seed": 0, "heldout_mrr": 0.5, "machine": {"cpu_bf16": True}},
                       {"seed": 1, "heldout_mrr": 0.5, "machine": {"cpu_bf16": False}}]}  # fmt: skip
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": False, "points": [point],
                                                     "config": {"train": {"precision": "fp32"}}}))
    table, lines = tuning_section(tmp_path, "mini")
    assert table["MRR per seed"].iloc[0] == "0: 0.500 fp32 / 1: 0.500 fp32" and "mixes" not in "\n".join(lines)
    # a run carried over from an earlier configuration that computed the same in fp32 says so
    seeds = [{"seed": 0, "heldout_mrr": 0.5, "carried_over": {"from": "infonce-0", "why": "fp32"}},
             {"seed": 1, "heldout_mrr": 0.5, "machine": {"cpu_bf16": False}}]  # fmt: skip
    point = {"axis": "train.lr", "value": 3e-4, "overrides": {"train.lr": 3e-4}, "seeds": seeds}
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": False, "points": [point]}))
    table, lines = tuning_section(tmp_path, "mini")
    assert table["MRR per seed"].iloc[0] == "0: 0.500 fp32 carried / 1: 0.500 fp32"
    assert "- `carried`: a run trained under an earlier configuration" in "\n".join(lines)


def test_a_search_from_an_earlier_configuration_chooses_nothing_for_the_current_one(tmp_path, workspace, monkeypatch):
    """A tuning record keeps the fingerprint of what its runs depend on (``basis``): once the profile's data,
    model, training or method settings change, the report shows its points as recorded, marks none chosen and
    says to search again, and ``--tune --dry-run`` no longer calls its points done."""
    from dreambench import tuning
    from dreambench.config import apply_overrides
    from dreambench.report import searched_values, tuning_section
    from dreambench.search_basis import tuning_basis, tuning_is_current

    config = PROFILES.get("mini").config
    folder = tmp_path / "mini" / "tuning"
    folder.mkdir(parents=True)
    point = {"axis": "train.lr", "value": 1e-3, "overrides": {"train.lr": 1e-3}, "heldout_mrr": 0.7,
             "seeds": [{"seed": 0, "heldout_mrr": 0.7}]}  # fmt: skip

    def section(basis):
        record = {"method": "infonce", "complete": True, "chosen": {"train.lr": 1e-3}, "points": [point],
                  "selection": SELECTION, **basis}
        (folder / "infonce.json").write_text(json.dumps(record))
        table, lines = tuning_section(tmp_path, "mini")
        return record, table["chosen"].iloc[0], "\n".join(lines)

    record, chosen, lines = section({"basis": tuning_basis(config, "infonce")})
    assert tuning_is_current(record, config) and chosen == "✔" and "earlier configuration" not in lines
    earlier = apply_overrides(config, {"train.precision": "bf16"})
    for basis in ({"basis": tuning_basis(earlier, "infonce")}, {"base_fingerprint": tuning.fingerprint(earlier)}):
        record, chosen, lines = section(basis)
        assert not tuning_is_current(record, config) and chosen == ""
        assert searched_values(tmp_path, "mini") == {}  # nothing counts as searched for the current profile
        assert "**searched from an earlier configuration of profile mini**" in lines and "--tune --methods infonce`" in lines
        assert "infonce: chose" not in lines
        runs_at = profile_values(PROFILES.get("mini"), "infonce", ["train.lr"])
        assert runs_at["train.lr"] > 0 and f"the main table runs at the profile's values {runs_at}" in lines
    # neither is the base value of a searched axis (every point sets it) nor the seed (every run sets it)
    moved = apply_overrides(config, {"train.lr": 5e-4, "train.seed": 7, "methods.dream.tau_init": 0.3})
    assert tuning_basis(moved, "dream", ["train.lr", "methods.dream.tau_init"]) == tuning_basis(
        config, "dream", ["train.lr", "methods.dream.tau_init"])
    assert tuning_basis(moved, "dream", ["train.lr"]) != tuning_basis(config, "dream", ["train.lr"])
    # an evaluation setting is not part of what the search's runs depend on
    evaluation = apply_overrides(config, {"eval.max_query_tokens": 128})
    assert tuning_basis(evaluation, "infonce") == tuning_basis(config, "infonce")
    assert tuning_basis(config, "dream") != tuning_basis(apply_overrides(config, {"methods.dream.tau_init": 0.2}), "dream")
    # the method's typed parameters count, not its overrides as written: restating a default changes nothing
    default = METHODS.get("dream").Params().num_heads
    same = apply_overrides(config, {"methods.dream.num_heads": default})
    assert tuning_basis(same, "dream") == tuning_basis(config, "dream")
    # and so does the data's build (its construction version changes the instances without changing an option)
    before = tuning_basis(config, "infonce")
    monkeypatch.setattr("dreambench.data.training.BUILD_VERSION", -1)
    assert tuning_basis(config, "infonce") != before
    monkeypatch.undo()

    # --tune --dry-run: a current record's points are done, an earlier configuration's are not
    smoke = PROFILES.get("smoke")
    results = workspace.results_dir / "smoke" / "tuning"
    results.mkdir(parents=True, exist_ok=True)
    values = smoke.tuning["infonce"][0][1]
    points = [{"axis": "train.lr", "value": v, "overrides": {"train.lr": v}, "heldout_mrr": 0.5, "seeds": []}
              for v in values]  # fmt: skip
    for basis, done in ((tuning_basis(smoke.config, "infonce"), len(values)),
                        (tuning_basis(apply_overrides(smoke.config, {"train.steps": 5}), "infonce"), 0)):
        (results / "infonce.json").write_text(json.dumps({"method": "infonce", "points": points, "basis": basis}))
        lines = "\n".join(tuning.describe(smoke, smoke.config, "infonce", workspace))
        assert lines.count(" done: held-out MRR ") == done


def test_shards_of_a_search_each_train_their_share_and_a_plain_tune_then_chooses(workspace, monkeypatch, capsys):
    """``--tune --shard I/N``: shard I trains runs I, I + N, … of the axis (values × seeds in grid order) and
    records them; a shard that finds runs of the axis still unrecorded writes no choice; once every run is
    recorded, the last shard to finish (or a plain ``--tune``) chooses exactly as an unsharded search does, and
    trains nothing again."""
    from dreambench import tuning

    mrr = {(3e-4, 0): 0.60, (3e-4, 1): 0.62, (1e-3, 0): 0.70, (1e-3, 1): 0.72}
    trained = []

    def fake(method, config, ws):
        trained.append((config.train.lr, config.train.seed))
        name = METHODS.get(method)(config, ws, "tune").checkpoint_dir().name
        return {"checkpoint": name, "heldout_mrr": mrr[config.train.lr, config.train.seed], "train_seconds": 30.0}

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    profile = _two_rate_profile()
    path = tuning.tuning_path(workspace.results_dir, "smoke", "infonce")
    assert tuning.tune(profile, profile.config, "infonce", workspace, shard=(1, 2)) is None
    assert trained == [(3e-4, 1), (1e-3, 1)] and not path.exists()  # its runs only; no record, no choice
    assert len(json.loads(tuning.runs_path(path).read_text())) == 2
    trained.clear()
    record = tuning.tune(profile, profile.config, "infonce", workspace, shard=(0, 2))
    assert trained == [(3e-4, 0), (1e-3, 0)]  # the other half; then every run is recorded and it chooses
    assert record["complete"] and record["chosen"] == {"train.lr": 1e-3}
    assert [p["heldout_mrr"] for p in record["points"]] == [pytest.approx(0.61), pytest.approx(0.71)]
    trained.clear()
    unsharded = tuning.tune(profile, profile.config, "infonce", workspace)
    assert trained == [] and unsharded["chosen"] == record["chosen"]
    assert [p["heldout_mrr"] for p in unsharded["points"]] == [p["heldout_mrr"] for p in record["points"]]



def test_sharded_tune_on_the_command_line_goes_axis_by_axis(workspace, monkeypatch, capsys):
    """``run_all.py --tune --shard I/N`` over smoke's two axes (lr, then the temperature at the chosen lr; one
    seed): each invocation trains its share of the axis it can reach, says when the search waits for another
    shard, renders nothing; the shard that records an axis's last run chooses and goes on. A bad I/N stops
    before any work."""
    from dreambench import tuning

    trained = []

    def fake(method, config, ws):
        trained.append((config.train.lr, config.methods.get("infonce", {}).get("temperature", 0.05)))
        name = METHODS.get(method)(config, ws, "tune").checkpoint_dir().name
        score = 0.5 + 10 * config.train.lr + config.methods.get("infonce", {}).get("temperature", 0.05)
        return {"checkpoint": name, "heldout_mrr": score, "train_seconds": 30.0}

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    assert run_all.main([*_args(workspace), "--tune", "--methods", "infonce", "--shard", "2/2"]) == 2
    assert "--shard '2/2'" in capsys.readouterr().err and not trained
    shard = [*_args(workspace), "--tune", "--methods", "infonce", "--shard"]
    assert run_all.main([*shard, "1/2"]) == 0  # lr 3e-3; lr 1e-3 is shard 0's
    assert trained == [(3e-3, 0.05)] and "once every shard has finished" in capsys.readouterr().out
    assert run_all.main([*shard, "0/2"]) == 0  # lr 1e-3: the axis is complete, 3e-3 kept; temperature 0.05 at
    assert trained[1:] == [(1e-3, 0.05)]  # 3e-3 is the lr axis's own point (recorded); 0.1 is shard 1's
    partial = load_tuning(workspace.results_dir, "smoke")["infonce"]  # the lr axis's points, no choice yet
    assert not partial["complete"] and [p["value"] for p in partial["points"]] == [1e-3, 3e-3]
    assert not (workspace.reports_dir / "smoke").exists()  # shards render nothing
    assert run_all.main([*shard, "1/2"]) == 0
    assert trained[2:] == [(3e-3, 0.1)]
    record = load_tuning(workspace.results_dir, "smoke")["infonce"]
    assert record["complete"] and record["chosen"] == {"train.lr": 3e-3, "methods.infonce.temperature": 0.1}
    assert "infonce: chose" in capsys.readouterr().out


def test_an_axis_that_keeps_its_last_rate_adds_the_next_beyond_it_until_it_keeps_an_inner_one(
    workspace, monkeypatch, tmp_path
):  # fmt: skip
    """The grid's last rate wins by more than the seed noise (1e-3: 0.705 against 0.605): the optimum is not
    bracketed, so the search adds 3e-3 (0.805, kept again), then 1e-2 (0.51), and keeps 3e-3; it never trains a
    value past the one it keeps. Sharded, each shard trains its share of the added values too. The report takes a
    stored search that kept its grid's last rate, where the profile declares values beyond it, as incomplete."""
    import dataclasses

    from dreambench import tuning
    from dreambench.report import tuning_section
    from dreambench.search_basis import next_beyond, rechoose

    mrr = {3e-4: 0.60, 1e-3: 0.70, 3e-3: 0.80, 1e-2: 0.51, 3e-2: 0.0}
    trained = []

    def fake(method, config, ws):
        trained.append((config.train.lr, config.train.seed))
        name = METHODS.get(method)(config, ws, "tune").checkpoint_dir().name
        return {"checkpoint": name, "heldout_mrr": mrr[config.train.lr] + 0.01 * config.train.seed,
                "train_seconds": 30.0}  # fmt: skip

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    profile = dataclasses.replace(_two_rate_profile(), tuning_beyond={"train.lr": (3e-3, 1e-2, 3e-2)})
    record = tuning.tune(profile, profile.config, "infonce", workspace)
    assert trained == [(lr, seed) for lr in (3e-4, 1e-3, 3e-3, 1e-2) for seed in (0, 1)]  # never 3e-2
    assert [p["value"] for p in record["points"]] == [3e-4, 1e-3, 3e-3, 1e-2]
    assert record["chosen"] == {"train.lr": 3e-3} and record["beyond"] == {"train.lr": [3e-3, 1e-2, 3e-2]}
    assert rechoose(record) == record["chosen"]
    assert next_beyond(record["points"][:2], (3e-3,)) == 3e-3 and next_beyond(record["points"][:3], ()) is None
    assert next_beyond(record["points"][:3], (3e-3, 1e-2)) == 1e-2 and next_beyond(record["points"], (1e-2,)) is None
    # the values run out while the axis still keeps its last: it keeps that one, and the search is complete
    trained.clear()
    short = dataclasses.replace(profile, config=apply_overrides(profile.config, {"train.steps": 5}),
                                tuning_beyond={"train.lr": (3e-3,)})  # fmt: skip
    ended = tuning.tune(short, short.config, "infonce", workspace)
    assert ended["complete"] and ended["chosen"] == {"train.lr": 3e-3} and rechoose(ended) == ended["chosen"]
    assert (1e-2, 0) not in trained and len(trained) == 6
    # --tune --dry-run on a record that stopped at the grid's edge names the value the search adds next
    edge = {**record, "points": record["points"][:2], "chosen": {"train.lr": 1e-3}}
    tuning.write_json_atomic(tuning.tuning_path(workspace.results_dir, "smoke", "infonce"), edge)
    monkeypatch.setattr(tuning, "tuning_is_current", lambda stored, config: True)
    lines = tuning.describe(profile, profile.config, "infonce", workspace)
    assert any(line.split() == ["0.003", "next:", "the", "axis", "keeps", "its", "last", "value", "0.001,", "so",
                                "the", "search", "adds", "this", "one"] for line in lines), lines  # fmt: skip
    # sharded: the shards reach the added values in turn, and the last to finish chooses as above
    trained.clear()
    other = dataclasses.replace(profile, config=apply_overrides(profile.config, {"train.steps": 3}))
    assert tuning.tune(other, other.config, "infonce", workspace, shard=(1, 2)) is None
    assert tuning.tune(other, other.config, "infonce", workspace, shard=(0, 2)) is None  # added 3e-3: shard 1's
    assert tuning.tune(other, other.config, "infonce", workspace, shard=(1, 2)) is None  # added 1e-2: shard 0's
    sharded = tuning.tune(other, other.config, "infonce", workspace, shard=(0, 2))
    assert sharded["chosen"] == {"train.lr": 3e-3} and sorted(trained) == sorted(
        (lr, seed) for lr in (3e-4, 1e-3, 3e-3, 1e-2) for seed in (0, 1))  # fmt: skip
    # the report: mini declares rates beyond its grid, so a search that kept the grid's last rate is incomplete
    folder = tmp_path / "mini" / "tuning"
    folder.mkdir(parents=True)
    points = [{**_point(lr, score, score + 0.01), "axis": "train.lr", "overrides": {"train.lr": lr}}
              for lr, score in ((1e-4, 0.50), (3e-4, 0.60), (1e-3, 0.70))]  # fmt: skip
    (folder / "infonce.json").write_text(json.dumps({"method": "infonce", "complete": True, "points": points,
                                                     "chosen": {"train.lr": 1e-3}, "selection": SELECTION}))  # fmt: skip
    assert tuning_section(tmp_path, "mini")[1][0].startswith(
        "- infonce: search incomplete (3 points so far and it kept its grid's last value, past which the profile "
        "adds more; ")  # fmt: skip


def test_a_diverged_run_is_recorded_so_shards_finish_and_no_search_trains_it_again(workspace, monkeypatch):
    """lr 1e-3 diverges at seed 1: the run is recorded as failed, so the shard that finishes the axis chooses
    (the failed point has no mean; 3e-4 is kept) instead of waiting for a run that would diverge again, a plain
    --tune then trains nothing, and the rate past the grid is not added (the axis does not keep its last value)."""
    import dataclasses

    from dreambench import tuning

    trained = []

    def fake(method, config, ws):
        trained.append((config.train.lr, config.train.seed))
        name = METHODS.get(method)(config, ws, "tune").checkpoint_dir().name
        if (config.train.lr, config.train.seed) == (1e-3, 1):
            return {"checkpoint": name, "failed": "loss is nan at step 3"}
        return {"checkpoint": name, "heldout_mrr": 0.6 + 100 * config.train.lr, "train_seconds": 30.0}

    monkeypatch.setattr(tuning, "_train_and_score", fake)
    profile = dataclasses.replace(_two_rate_profile(), tuning_beyond={"train.lr": (3e-3,)})
    path = tuning.tuning_path(workspace.results_dir, "smoke", "infonce")
    assert tuning.tune(profile, profile.config, "infonce", workspace, shard=(1, 2)) is None
    assert trained == [(3e-4, 1), (1e-3, 1)]
    failed = [run for run in json.loads(tuning.runs_path(path).read_text()).values() if run.get("failed")]
    assert [run["seed"] for run in failed] == [1] and failed[0]["failed"] == "loss is nan at step 3"
    record = tuning.tune(profile, profile.config, "infonce", workspace, shard=(0, 2))
    assert trained[2:] == [(3e-4, 0), (1e-3, 0)] and record["complete"]
    assert record["chosen"] == {"train.lr": 3e-4} and [p["value"] for p in record["points"]] == [3e-4, 1e-3]
    assert record["points"][1]["heldout_mrr"] is None and "seed 1: loss is nan" in record["points"][1]["failed"]
    assert tuning.tune(profile, profile.config, "infonce", workspace)["chosen"] == record["chosen"]
    assert len(trained) == 4  # nothing trained again, the diverged run included; 3e-3 never added
    lines = tuning.describe(profile, profile.config, "infonce", workspace)
    assert any(" done: held-out MRR failed" in line for line in lines), lines
