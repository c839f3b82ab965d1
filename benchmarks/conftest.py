"""Every benchmark JSON records the fingerprint of the code it timed (``dreambench.perf.code_fingerprint``) and
whether that code had uncommitted changes (``dreambench.perf.code_changes``)."""

from dreambench.perf import code_changes, code_fingerprint


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["code_fingerprint"] = code_fingerprint()
    output_json["code_changes"] = code_changes()
