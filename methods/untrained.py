"""The untrained backbone as a retriever: last-token pooling, prefixes, no training (the starting point)."""

from __future__ import annotations

from dreambench.method import DenseMethod, register_method


@register_method("untrained")
class Untrained(DenseMethod):
    description = "backbone with EOS pooling and prefixes, before any training (reference point)"
    main_table = True
    run_order = 1
    row_order = 1

    def prepare(self) -> None:
        self.retriever = self.load_retriever(lora=False).eval()

    def close(self) -> None:
        self.retriever = None
