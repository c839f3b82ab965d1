"""Every benchmark JSON records the fingerprint of the code it timed (``dreambench.perf.code_fingerprint``)."""

from dreambench.perf import code_fingerprint


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["code_fingerprint"] = code_fingerprint()
