"""Typed config: overrides coerce to field types; unknown names and bad values are clear errors."""

import pytest

from dreambench.config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    fingerprint,
    load_config_file,
    method_params,
    parse_cli_overrides,
)
from dreambench.registry import Registry


def test_cli_overrides_are_coerced():
    cfg = apply_overrides(
        RunConfig(), parse_cli_overrides(["train.lr=3e-4", "train.steps=7", "eval.datasets=a,b"])
    )
    assert cfg.train.lr == 3e-4 and cfg.train.steps == 7 and cfg.eval.datasets == ("a", "b")
    assert RunConfig().train.steps != 7  # the base is untouched (frozen)


def test_unknown_option_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"unknown option 'stpes' \(did you mean 'steps'\?\)"):
        apply_overrides(RunConfig(), {"train.stpes": 3})


def test_bad_value_names_the_option():
    with pytest.raises(ConfigError, match=r"train\.steps: expected an integer"):
        apply_overrides(RunConfig(), {"train.steps": "many"})
    with pytest.raises(ConfigError, match="key=value"):
        parse_cli_overrides(["train.steps"])


def test_toml_file_applies_and_errors_name_the_file(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text("[train]\nsteps = 12\n[methods.bm25]\nk1 = 1.2\n")
    cfg = load_config_file(good, RunConfig())
    assert cfg.train.steps == 12 and cfg.methods == {"bm25": {"k1": 1.2}}
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsteps = = 3\n")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config_file(bad, RunConfig())
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[trian]\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"unknown.toml: unknown option 'trian'"):
        load_config_file(unknown, RunConfig())


def test_method_params_validate_against_the_adapter_dataclass():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class P:
        k1: float = 0.9

    cfg = apply_overrides(RunConfig(), {"methods.bm25.k1": "1.5"})
    assert method_params(P, cfg, "bm25").k1 == 1.5
    with pytest.raises(ConfigError, match=r"methods\.bm25: unknown option 'k2'"):
        method_params(P, apply_overrides(RunConfig(), {"methods.bm25.k2": 1}), "bm25")


def test_fingerprint_is_stable_and_sensitive():
    assert fingerprint(RunConfig()) == fingerprint(RunConfig())
    assert fingerprint(RunConfig()) != fingerprint(apply_overrides(RunConfig(), {"train.lr": 1.0}))


def test_registry_duplicates_and_hints():
    reg: Registry[int] = Registry("thing")
    reg.add("alpha", 1)
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("alpha", 2)
    with pytest.raises(KeyError, match="did you mean 'alpha'"):
        reg.get("alpah")
