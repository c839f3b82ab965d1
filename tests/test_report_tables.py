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


@pytest.mark.parametrize("rows", [15, 25])
def test_training_curves_give_every_row_its_own_colour_and_keep_the_legend_on_the_figure(tmp_path, monkeypatch, rows):
    """More rows than matplotlib's ten-colour cycle, with long labels, over three seeds: no two rows share a colour,
    and every legend entry lies inside the saved figure (past ~20 entries, in two columns)."""
    from matplotlib.colors import to_rgba

    from dreambench.evaluation.metrics import MAIN_METRIC
    from dreambench.report import figures

    curve = {"step": [1, 2, 3], "loss": [1.0, 0.9, 0.8], "tau": [0.1, 0.1, 0.1]}
    runs = [("dream", "default" if i == 0 else f"heads-random-middle-{i}", seed)
            for i in range(rows) for seed in (0, 1, 2)]  # fmt: skip
    frame = pd.DataFrame({"metric": MAIN_METRIC, "method": [m for m, _, _ in runs],
                          "experiment": [e for _, e, _ in runs], "seed": [s for _, _, s in runs],
                          "training": [{"curve": curve}] * len(runs)})  # fmt: skip
    seen = {}

    def capture(fig, path, dpi):
        fig.canvas.draw()
        (legend,) = fig.legends
        seen.update(figure=fig.bbox, entries=[text.get_window_extent() for text in legend.get_texts()],
                    colours=[to_rgba(line.get_color()) for line in legend.get_lines()][:rows])  # fmt: skip

    monkeypatch.setattr(figures, "save_figure", capture)
    assert figures.plot_training_curves(frame, tmp_path / "curves.png", {"tau": "τ"})
    assert len(seen["entries"]) == rows + 3  # a colour a row, a line style a seed
    box = seen["figure"]
    assert all(box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1 for e in seen["entries"])
    assert len(set(seen["colours"])) == rows
