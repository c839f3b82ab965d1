"""The untrained backbone as a retriever: last-token pooling, prefixes, no training (the starting point)."""

from __future__ import annotations

from dreambench.method import DenseMethod, register_method


@register_method("untrained")
class Untrained(DenseMethod):
    description = "backbone with EOS pooling and prefixes, before any training (reference point)"

    def prepare(self) -> None:
        from dreambench.models.backbones import default_device
        from dreambench.models.retriever import DenseRetriever

        self.retriever = DenseRetriever.from_config(self.config.model, self.workspace, lora=False)
        self.retriever.to(default_device()).eval()

    def close(self) -> None:
        self.retriever = None
