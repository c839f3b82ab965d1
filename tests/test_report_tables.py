"""The main table as shown and as LaTeX: ± and significance marks kept, the best value per column in bold."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from dreambench.report.tables import latex_table


def shown_table() -> pd.DataFrame:
    return pd.DataFrame(
        {"nano-scifact": ["**0.7109**‡", "0.3924 ± 0.0398†"], "avg BEIR (nano)": ["**0.4694**", None]},
        index=pd.Index(["bm25", "dream/heads_top4"], name="row"),
    )


def test_latex_keeps_plus_minus_marks_and_bold_and_escapes_the_rest():
    tex = latex_table(shown_table())
    assert r"\textbf{0.7109}\textsuperscript{\ddag}" in tex
    assert r"0.3924 $\pm$ 0.0398\textsuperscript{\dag}" in tex
    assert r"dream/heads\_top4" in tex and "--" in tex  # escaped label; a missing cell
    lines = tex.splitlines()
    assert lines[0] == r"\begin{tabular}{lrr}" and lines[2].startswith("row & nano-scifact")
    assert lines[3] == r"\midrule" and len(lines) == 8  # one header row, no stray index-name row


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX engine on this machine")
def test_latex_table_compiles(tmp_path):
    document = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n" + latex_table(shown_table())
    (tmp_path / "t.tex").write_text(document + "\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "t.tex"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]


def test_the_best_mean_of_each_column_is_bold_in_the_display_table():
    from dreambench.report.tables import display_table

    main = pd.DataFrame({"d": [0.5, 0.25]}, index=pd.Index(["a", "b"], name="row"))
    frame = pd.DataFrame({"metric": [], "group": [], "method": [], "experiment": [], "dataset": [], "value": []})
    shown = display_table(frame, main, pd.DataFrame())
    assert list(shown["d"]) == ["**0.5000**", "0.2500"]
