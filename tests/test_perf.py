"""reports/performance.md: ratios within one benchmark run, targets met or not, the sweep table and plot."""

import json

from dreambench.perf import CODE_FOLDERS, code_fingerprint
from dreambench.report import render_performance as render


def _bench(name, median, **extra):
    return {"name": name, "stats": {"median": median, "min": median, "max": median, "rounds": 3}, "extra_info": extra}


def test_performance_report_computes_the_target_ratios_within_one_run(tmp_path):
    sweep = [_bench(f"test_attention_sweep[s-T{t}-h{h}-{impl}]", t / 1000 * f, shape="smollm2-135m", length=t,
                    selected_heads=h, impl=impl)
             for t in (512, 1024) for h in (1, 9) for impl, f in (("kernel", 1.0), ("eager", 4.0), ("sdpa", 0.5))
             if not (impl == "sdpa" and h == 9)]  # fmt: skip
    payload = {
        "machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2}, "python_version": "3.11"},
        "commit_info": {"id": "abc", "dirty": True}, "datetime": "now", "code_fingerprint": "0123456789ab",
        "benchmarks": [
            _bench("test_step_infonce", 4.0, tokens_per_s=400.0),
            _bench("test_step_dream[prefix-stored]", 5.0),
            _bench("test_step_dream_vs_infonce_paired", 9.0, dream_median_s=5.1, infonce_median_s=3.9, ratio=1.28),
            _bench("test_step_dream[prefix-cached]", 6.0),
            _bench("test_step_dream[full-pass]", 12.0),
            _bench("test_encode", 1.0, tokens_per_s=1000.0),
            _bench("test_judge_step[forward_backward]", 2.0),
            _bench("test_judge_step[injected]", 2.1),
            _bench("test_judge_step[dream]", 1.5),
            _bench("test_judge_injection_paired", 4.3, stock_median_s=2.0, injected_median_s=2.3, ratio=1.2,
                   stock_peak_mb=100.0, injected_peak_mb=105.0, memory_ratio=1.05),
            _bench("test_judge_prefix", 1.8),
            *sweep,
        ],
    }  # fmt: skip
    (tmp_path / "b.json").write_text(json.dumps(payload))
    text = render(tmp_path / "b.json", tmp_path / "performance.md").read_text()
    assert "Test CPU, 2 logical cores" in text
    assert "at commit abc with uncommitted changes to its code, code fingerprint 0123456789ab" in text
    assert ("| DREAM training step (prefix stored) / InfoNCE step, steps alternated on the same instances | 1.28× "
            "| at most 1.3× | yes |") in text
    assert "| DREAM step (prefix stored) / InfoNCE step, from their separate benchmarks | 1.25× |" in text
    assert "(the first run over a training set) / InfoNCE step | 1.50× |" in text
    assert "| DREAM step, prefix computed in the step / prefix stored | 1.20× |" in text
    assert "| judge forward+backward with injection / without (time), passes alternated | 1.20× | at most 1.1× | **no** |" in text
    assert "without (peak allocated memory) | 1.05× | at most 1.1× | yes |" in text
    assert "| judge forward+backward with injection / without, from their separate benchmarks | 1.05× |" in text
    assert "(injected, backward to the document weights only) / stock forward+backward | 0.75× |" in text
    assert "| retriever training tokens/s / encoding tokens/s | 0.40× | at least 0.3× | yes |" in text
    assert "| DREAM step, full pass / prefix-cached | 2.00× |" in text
    assert "| Revela step / InfoNCE step | not measured |" in text
    assert "(InfoNCE step + the judge's no-grad pass over the documents) / InfoNCE step | 1.45× |" in text
    assert "eager / kernel" in text and (tmp_path / "performance_sweep.png").is_file()
    # a run that rewrote only reports/ (pytest-benchmark's flag is set) over committed code
    payload["code_changes"] = False
    (tmp_path / "b.json").write_text(json.dumps(payload))
    text = render(tmp_path / "b.json", tmp_path / "performance.md").read_text()
    assert "at commit abc, code fingerprint 0123456789ab" in text


def test_the_code_fingerprint_names_the_sources_and_nothing_else(tmp_path):
    for folder in CODE_FOLDERS:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    before = code_fingerprint(tmp_path)
    (tmp_path / "dreambench" / "notes.txt").write_text("not code")
    (tmp_path / "README.md").write_text("not code")
    assert code_fingerprint(tmp_path) == before and len(before) == 12
    (tmp_path / "methods" / "a.py").write_text("x = 2\n")
    assert code_fingerprint(tmp_path) != before
