"""docs/fidelity.md: a row for every setting, every recorded value the one its profile runs, and the committed
file what the code renders."""

import dataclasses
import typing
from collections import Counter

import pytest

from dreambench.cli.fidelity import main
from dreambench.config import DataConfig, EvalConfig, ModelConfig, TrainConfig
from dreambench.fidelity import (
    COMMAND,
    DOC_PATH,
    actual_value,
    coverage_problems,
    format_value,
    render_fidelity,
    value_problems,
)
from dreambench.fidelity_rows import PROFILE_ORDER, ROWS, Row, Varies
from dreambench.method import METHODS
from dreambench.profiles import MINI_TUNED, PROFILES
from dreambench.workspace import PROJECT_ROOT


def _leaves(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        nested = hints[f.name]
        keys += (
            _leaves(nested, f"{prefix}.{f.name}")
            if dataclasses.is_dataclass(nested)
            else [f"{prefix}.{f.name}"]
        )
    return keys


def _settings() -> list[str]:
    """Every setting, enumerated from the config dataclasses and the method registry."""
    areas = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "eval": EvalConfig}
    keys = [key for area, cls in areas.items() for key in _leaves(cls, area)]
    shipped = [(n, cls) for n, cls in METHODS.items() if cls.__module__.startswith("methods.")]
    assert {"bm25", "untrained", "infonce", "replug", "revela", "dream"} <= {n for n, _ in shipped}
    return keys + [f"methods.{n}.{f.name}" for n, cls in shipped for f in dataclasses.fields(cls.Params)]


def test_a_method_added_through_the_search_path_needs_no_row():
    """The document covers the shipped adapters; a throwaway or user adapter registered beside them (as
    tests/test_runner.py does) neither needs a row nor appears."""
    from dreambench.fidelity import method_order
    from dreambench.method import Method, register_method

    if "fidelity-probe" not in METHODS:

        @register_method("fidelity-probe")
        class Probe(Method):  # a module outside the methods package
            description = "probe"

            def retrieve(self, data, depth):
                return {}

    assert "fidelity-probe" not in method_order() and coverage_problems() == []


def test_every_setting_has_exactly_one_row():
    counts = Counter(row.key for row in ROWS)
    settings = _settings()
    assert [key for key in settings if counts[key] == 0] == [], "settings without a row"
    assert [key for key in settings if counts[key] > 1] == [], "settings with several rows"
    assert sorted(set(counts) - set(settings)) == [], "rows of no setting"
    assert coverage_problems() == []


def test_a_row_for_a_setting_that_does_not_exist_is_reported():
    rows = (*ROWS, Row("train.no_such_option", "not specified", 1, 1, 1))
    assert coverage_problems(rows) == ["train.no_such_option: a row for a setting that does not exist"]


def test_a_missing_and_a_repeated_row_are_reported():
    dropped, repeated = ROWS[0], ROWS[1]
    rows = (*ROWS[1:], repeated)
    assert coverage_problems(rows) == [f"{dropped.key}: no row", f"{repeated.key}: 2 rows"]


def test_every_recorded_value_is_the_one_its_profile_runs():
    assert value_problems() == []


def test_values_are_read_after_the_main_experiments_overrides():
    mini = PROFILES.get("mini")
    assert MINI_TUNED["drama"]["train.lr"] != mini.config.train.lr  # the search's choice, not the profile's
    assert actual_value("train.lr", mini, "drama") == MINI_TUNED["drama"]["train.lr"]
    assert actual_value("methods.dream.tau_init", mini, "dream") == mini.config.methods["dream"]["tau_init"]
    tuned = _with_main_override(mini, "dream", **{"train.lr": 1e-3, "methods.dream.tau_init": 0.02})
    assert actual_value("methods.dream.tau_init", tuned, "dream") == 0.02
    assert actual_value("train.lr", tuned, "dream") == 1e-3
    assert actual_value("train.lr", tuned, "bm25") == mini.config.train.lr  # no override


def _with_train(profile, **changes):
    config = profile.config
    return dataclasses.replace(
        profile, config=dataclasses.replace(config, train=dataclasses.replace(config.train, **changes))
    )


def _with_method_params(profile, method, **changes):
    methods = {**profile.config.methods, method: {**profile.config.methods.get(method, {}), **changes}}
    return dataclasses.replace(profile, config=dataclasses.replace(profile.config, methods=methods))


def _with_main_override(profile, method, **overrides):
    experiments = tuple(
        dataclasses.replace(e, overrides={**e.overrides, **overrides})
        if (e.method, e.name) == (method, "default")
        else e
        for e in profile.experiments
    )
    return dataclasses.replace(profile, experiments=experiments)


@pytest.mark.parametrize(
    ("name", "change", "key"),
    [
        ("mini", lambda p: _with_train(p, warmup_steps=p.config.train.warmup_steps + 1), "train.warmup_steps"),
        ("paper", lambda p: _with_method_params(p, "dream", num_heads=8), "methods.dream.num_heads"),
        ("mini", lambda p: _with_main_override(p, "replug", **{"methods.replug.tau": 0.5}), "methods.replug.tau"),
        ("mini", lambda p: _with_main_override(p, "dream", **{"train.lr": 0.5}), "train.lr"),
        ("smoke", lambda p: dataclasses.replace(p, config=dataclasses.replace(
            p.config, model=dataclasses.replace(p.config.model, lora_r=5))), "model.lora_r"),
    ],
    ids=["profile-config", "method-params", "tuned-method-param", "tuned-shared-key", "model"],
)  # fmt: skip
def test_a_changed_profile_value_is_reported_with_its_key_and_profile(name, change, key):
    changed = change(PROFILES.get(name))
    problems = value_problems([changed])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{key} [{name}]: the row records ")


def test_a_value_that_varies_between_methods_names_them():
    assert format_value(Varies(1e-3, {"revela": 3e-4})) == "1e-3 (revela: 3e-4)"
    assert format_value(("q_proj", "k_proj")) == "`q_proj, k_proj`"
    assert format_value("Query: ") == '`"Query: "`'
    assert format_value(48_000) == "48,000"


def test_every_profile_has_a_column_and_every_row_a_paper_value():
    assert set(PROFILES.names()) == set(PROFILE_ORDER), "a new profile needs its column in the rows"
    assert [row.key for row in ROWS if not row.paper] == [], (
        "write 'not specified' where no paper gives a value"
    )


def test_the_committed_document_is_what_the_code_renders():
    committed = (PROJECT_ROOT / DOC_PATH).read_text()
    assert committed == render_fidelity(), f"{DOC_PATH} is out of date: run {COMMAND}"


def test_the_command_writes_the_document_and_checks_it(tmp_path, capsys):
    path = tmp_path / "fidelity.md"
    assert main(["--check", "--output", str(path)]) == 1  # no file yet
    assert main(["--output", str(path)]) == 0
    assert path.read_text() == render_fidelity()
    assert main(["--check", "--output", str(path)]) == 0
    path.write_text(path.read_text() + "edited by hand\n")
    assert main(["--check", "--output", str(path)]) == 1
    assert "is not what the code renders" in capsys.readouterr().err
