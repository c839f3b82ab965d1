"""Text helpers shared by the data pipeline and lexical methods: sentences, chunks, stemming."""

from __future__ import annotations

import re

# A sentence ends at . ! ? (optionally followed by a closing quote/bracket) before whitespace and an
# upper-case letter, digit or opening quote — unless the word before the stop is a common abbreviation or a
# single capital letter (initials such as "J. R. R. Tolkien").
_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "etc", "e.g", "i.e", "no", "fig", "approx",
    "c", "ca", "est", "inc", "ltd", "co", "corp", "gen", "col", "lt", "sgt", "rev", "u.s", "u.k", "jan", "feb", "mar",
    "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
}  # fmt: skip
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]?\s+(?=[\"'“‘(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    text = " ".join(text.split())
    if not text:
        return []
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        candidate = text[start : match.start()].rstrip()
        last_word = candidate.rsplit(" ", 1)[-1].strip(".!?\"'“”‘’()[]").lower()
        if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def chunk_text(text: str, max_words: int, min_words: int = 1) -> list[str]:
    """Greedily pack whole sentences into chunks of at most ``max_words`` words.

    A sentence longer than ``max_words`` is cut at word boundaries. A final chunk shorter than
    ``min_words`` is merged into the previous one (if that keeps it within 1.5 × ``max_words``) or dropped.
    """
    if max_words < 1 or min_words < 1:
        raise ValueError("chunk sizes must be positive")
    pieces: list[list[str]] = []
    for sentence in split_sentences(text):
        words = sentence.split()
        for i in range(0, len(words), max_words):
            pieces.append(words[i : i + max_words])
    chunks: list[list[str]] = []
    for words in pieces:
        if chunks and len(chunks[-1]) + len(words) <= max_words:
            chunks[-1].extend(words)
        else:
            chunks.append(list(words))
    if len(chunks) > 1 and len(chunks[-1]) < min_words:
        tail = chunks.pop()
        if len(chunks[-1]) + len(tail) <= int(1.5 * max_words):
            chunks[-1].extend(tail)
    return [" ".join(c) for c in chunks if len(c) >= min_words]


def english_stemmer():
    """Snowball English stemmer (PyStemmer), as used by the bm25s backend and candidate-set search."""
    import Stemmer

    return Stemmer.Stemmer("english")
