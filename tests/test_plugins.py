"""A method from outside the repository: one adapter file in a folder on the method search path, no other file
edited. It runs, gets its row in the smoke report's main table, and the registry-driven tests cover it.

Everything runs in subprocesses, so the throwaway adapter never enters this process's registry."""

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from dreambench.workspace import PROJECT_ROOT

ADAPTER = textwrap.dedent('''
    """A throwaway lexical method: scores a document by how many query words it contains."""

    from dataclasses import dataclass

    from dreambench.method import LexicalMethod, register_method

    @dataclass(frozen=True)
    class WordCountParams:
        lowercase: bool = True

    @register_method("word-count")
    class WordCount(LexicalMethod):
        description = "query words found in the document (a plug-in adapter)"
        Params = WordCountParams
        main_table = True
        run_order = 99

        def index(self, data):
            fold = str.lower if self.params.lowercase else str
            self.docs = {d: set(fold(f"{v['title']} {v['text']}").split()) for d, v in data.corpus.items()}

        def search(self, queries, depth):
            fold = str.lower if self.params.lowercase else str
            run = {}
            for qid, text in queries.items():
                words = set(fold(text).split())
                scores = {d: float(len(words & terms)) for d, terms in self.docs.items()}
                run[qid] = dict(sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:depth])
            return run
''')


@pytest.fixture
def plugin_folder(tmp_path):
    folder = tmp_path / "my_methods"
    folder.mkdir()
    (folder / "word_count.py").write_text(ADAPTER)
    return folder


def _run(args, env=None, cwd=PROJECT_ROOT):
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.mark.slow
def test_a_plugin_adapter_runs_and_gets_its_row_in_the_main_table(plugin_folder, tmp_path):
    folders = ["--data-dir", str(tmp_path / "data"), "--cache-dir", str(tmp_path / "cache"),
               "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    listed = _run([sys.executable, "run_all.py", "--methods-path", str(plugin_folder), "--list"])
    assert listed.returncode == 0 and "word-count" in listed.stdout
    run = _run([sys.executable, "run_all.py", "--profile", "smoke", "--methods-path", str(plugin_folder),
                "--methods", "word-count,untrained", "--no-signal-check", *folders])  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    main = pd.read_csv(tmp_path / "reports" / "smoke" / "main_table.csv", index_col=0)
    # a row of its own, placed by its declared row order (the default: among the baselines, before DREAM),
    # beside the profile's other main-table rows, which have no result yet
    assert list(main.index).index("word-count") == list(main.index).index("dream") - 1
    assert 0.0 <= main.loc["word-count", "wiki-desc2lead"] <= 1.0
    assert main["wiki-desc2lead"].dropna().index.tolist() == ["untrained", "word-count"]
    # the same through the environment variable, as a torchrun or SLURM launch would pass it on
    again = _run([sys.executable, "run_all.py", "--profile", "smoke", "--methods", "word-count", "--dry-run",
                  *folders], env={"DREAMBENCH_METHODS_PATH": str(plugin_folder)})  # fmt: skip
    assert again.returncode == 0 and "word-count" in again.stdout


@pytest.mark.slow
def test_the_registry_driven_tests_cover_a_plugin_adapter(plugin_folder):
    result = _run([sys.executable, "-m", "pytest", "tests/test_methods.py", "-k", "word-count", "-q",
                   "-p", "no:cacheprovider"], env={"DREAMBENCH_METHODS_PATH": str(plugin_folder)})  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout  # its declarations and its end-to-end smoke run


def test_a_plugin_that_fails_to_import_is_named(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "oops.py").write_text("raise RuntimeError('half-written adapter')\n")
    result = _run([sys.executable, "run_all.py", "--methods-path", str(folder), "--list"])
    assert result.returncode == 2
    assert f"{folder / 'oops.py'}: RuntimeError: half-written adapter" in result.stderr
