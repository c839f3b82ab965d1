"""``index.html``: the report as one self-contained page, every table sortable."""

from __future__ import annotations

import base64
import re
from pathlib import Path

HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.4em; text-align: right; white-space: nowrap; }
th { white-space: normal; min-width: 4em; }
td.prose { white-space: normal; text-align: left; min-width: 16em; }
th { background: #f0f0f0; cursor: pointer; position: sticky; top: 0; }
th:first-child, td:first-child { text-align: left; }
th.sorted-asc::after { content: " ▲"; } th.sorted-desc::after { content: " ▼"; }
code { background: #f6f6f6; padding: 0 0.2em; } pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
img { max-width: 100%; }
"""

# click a column header to sort its table (numbers by value: a cell's leading number, '–' last); long prose cells
# wrap, so that a table fits the page instead of scrolling sideways
HTML_SORT = """
// cells of prose (a verdict, a note) wrap; numbers and short labels stay on one line
document.querySelectorAll("td").forEach(function (td) {
  var text = td.textContent || "";
  if (text.length > 28 && /[a-z]{3}/.test(text)) { td.classList.add("prose"); }
});
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var desc = !th.classList.contains("sorted-desc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      function key(row) {
        var text = (row.cells[col] || {}).textContent || "", n = parseFloat(text);
        return isNaN(n) ? text : n;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x !== typeof y) { return typeof x === "number" ? -1 : 1; }
        var order = x < y ? -1 : x > y ? 1 : 0;
        return desc ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def render_html(report_md: Path) -> Path:
    """``index.html`` beside ``report.md``: the same content, figures embedded (one self-contained file),
    every table sortable by clicking a column header."""
    import markdown

    body = markdown.markdown(report_md.read_text(encoding="utf-8"), extensions=["tables", "fenced_code"])

    def embed(match: re.Match) -> str:
        path = report_md.parent / match.group(1)
        if not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    body = re.sub(r'src="([^"/:]+\.png)"', embed, body)
    title = report_md.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    page = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n'
        f"<style>{HTML_STYLE}</style>\n</head>\n<body>\n{body}\n<script>{HTML_SORT}</script>\n</body>\n</html>\n"
    )
    target = report_md.parent / "index.html"
    target.write_text(page, encoding="utf-8")
    return target
