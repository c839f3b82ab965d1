"""Every registered method, whatever its name: these tests iterate over the registry, so an adapter added to
``methods/`` or through the method search path (``DREAMBENCH_METHODS_PATH``) is covered without editing them."""

import dataclasses

import pytest

from dreambench.config import apply_overrides, method_params
from dreambench.data.loader import VIEWS
from dreambench.evaluation.metrics import MAIN_METRIC
from dreambench.method import METHODS, DenseMethod, LexicalMethod, TrainedDenseMethod
from dreambench.profiles import PROFILES

SMOKE = PROFILES.get("smoke").config
NAMES = METHODS.names()


@pytest.mark.parametrize("name", NAMES)
def test_the_adapter_declares_what_the_benchmark_needs(name):
    cls = METHODS.get(name)
    assert cls.name == name and cls.description.strip()
    assert issubclass(cls, (LexicalMethod, DenseMethod))
    assert isinstance(cls.main_table, bool) and isinstance(cls.run_order, int) and isinstance(cls.row_order, int)
    params = method_params(cls.Params, SMOKE, name)  # the defaults build, and are frozen
    assert dataclasses.is_dataclass(params) and cls.Params.__dataclass_params__.frozen
    if issubclass(cls, TrainedDenseMethod):
        assert cls.view in VIEWS
    else:
        assert not cls.trainable and not cls.tuning_knobs


@pytest.mark.parametrize("name", [n for n in NAMES if METHODS.get(n).tuning_knobs])
def test_every_tuning_axis_is_a_setting_whose_first_value_is_the_default(name):
    cls = METHODS.get(name)
    for key, values in cls.tuning_knobs:
        assert len(values) >= 2 and len(set(values)) == len(values), key
        configured = apply_overrides(SMOKE, {key: values[0]}, where=f"{name}.tuning_knobs")
        assert method_params(cls.Params, configured, name) == method_params(cls.Params, SMOKE, name), key


def test_the_main_table_is_what_the_adapters_declare():
    from dreambench.profiles import not_in_main_table

    for profile in (PROFILES.get(n) for n in PROFILES.names()):
        main = [e.method for e in profile.experiments if e.group == "main" and e.name == "default"]
        declared = sorted((n for n in NAMES if METHODS.get(n).main_table and n not in not_in_main_table(profile)),
                          key=lambda n: METHODS.get(n).run_order)  # fmt: skip
        assert main == declared, profile.name
        trained = {n for n in declared if METHODS.get(n).trainable}
        if profile.name != "smoke":  # smoke searches smaller grids, for the tuning tests' speed
            assert set(profile.tuning) == trained


@pytest.mark.parametrize("name", NAMES)
def test_every_method_runs_end_to_end_in_the_smoke_profile(name, smoke_run):
    outcome, payload = smoke_run(name)
    assert outcome.status == "computed", outcome.message
    assert 0.0 <= outcome.scores[MAIN_METRIC] <= 1.0
    assert payload["method"] == name and payload["fingerprint"]
    assert payload["kind"] == ("lexical" if issubclass(METHODS.get(name), LexicalMethod) else "dense")
    if payload["kind"] == "dense":
        assert payload["geometry"]["pairs"] > 0
    if METHODS.get(name).trainable:
        assert payload["training"]["steps"] == SMOKE.train.steps


def test_main_variants_add_rows_and_an_offline_profile_lists_what_needs_the_internet(monkeypatch):
    """A method's ``main_variants`` become named main-table experiments at the tuned values plus their own
    overrides; under an offline profile a method whose ``needs_online`` says why is left out of the plan and
    listed by the report instead; the online ``paper`` profile runs it."""
    import dataclasses

    from dreambench.profiles import PROFILES, main_experiments, online_only
    from dreambench.report.sections import _not_run_offline

    for name in ("promptreps", "diffretriever"):
        monkeypatch.setattr(METHODS.get(name), "main_table", True)
    mini = PROFILES.get("mini")
    offline = main_experiments({"promptreps": {"methods.promptreps.alpha": 0.25}}, mini.config)
    rows = {(e.method, e.name): dict(e.overrides) for e in offline}
    assert rows[("promptreps", "default")] == {"methods.promptreps.alpha": 0.25}
    assert rows[("promptreps", "dense")] == {"methods.promptreps.alpha": 0.25, "methods.promptreps.scoring": "dense"}
    assert rows[("promptreps", "sparse")]["methods.promptreps.scoring"] == "sparse"
    assert not any(method == "diffretriever" for method, _ in rows)
    online = {(e.method, e.name) for e in main_experiments({})}
    assert {("diffretriever", "default"), ("diffretriever", "dense"), ("diffretriever", "sparse")} <= online
    needs = METHODS.get("diffretriever").needs_online(mini.config)
    assert needs.startswith("needs the diffusion LM Dream-org/Dream-v0-Instruct-7B") and needs.endswith("online only")
    assert METHODS.get("diffretriever").needs_online(PROFILES.get("smoke").config) == ""  # the tiny Llama
    assert online_only(mini) == {"diffretriever": needs}
    assert online_only(dataclasses.replace(mini, offline=False)) == {}
    listed = f"- not in this table: diffretriever, {needs} (it runs under `--profile paper`)"
    # a method the profile leaves out for a stated reason is listed with it (and no pointer to the paper profile)
    assert _not_run_offline("mini") == [listed, f"- not in this table: revela, {mini.left_out['revela']}"]
    assert not any(e.method == "revela" for e in mini.experiments) and "revela" not in mini.tuning


def test_a_method_the_profile_leaves_out_is_not_planned_but_runs_when_named():
    """Mini leaves Revela out of its plan and search (the report says why); named, with or without the
    ``default`` experiment the report's commands give, it runs its default experiment at the profile's values."""
    from dreambench.plan import plan_jobs
    from dreambench.profiles import PROFILES

    mini = PROFILES.get("mini")
    assert "revela" in mini.left_out and not any(e.method == "revela" for e in mini.experiments)
    for experiments in (None, ["default"], ["revela/default"]):
        jobs = plan_jobs(mini, mini.config, ["revela"], ["nano-scifact"], experiments, [0])
        assert {(j.experiment.method, j.experiment.name) for j in jobs} == {("revela", "default")}, experiments
        assert all(j.config == mini.config for j in jobs)
    jobs = plan_jobs(mini, mini.config, None, ["nano-scifact"], ["revela/default"], [0])  # named by experiment only
    assert {(j.experiment.method, j.experiment.name) for j in jobs} == {("revela", "default")}
    assert not plan_jobs(mini, mini.config, ["bm25"], ["nano-scifact"], ["revela/default", "default"], [0])[1:]
    with pytest.raises(ValueError, match="unknown experiment"):
        plan_jobs(mini, mini.config, ["revela"], None, ["heads-top99"], None)
