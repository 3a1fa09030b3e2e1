"""The shape of a question, for reporting recall by shape: "When ...?" questions hold up on unseen conversations
while questions that name a date, ask how long, ask which year, list instances or relate two events are where
recall is lost. The rules live beside the question analysis (``retrieval/decomposition.py``), since a query's
explanation names the shape too; the engine does not branch on these labels."""

from __future__ import annotations

from compassmem.retrieval.decomposition import SHAPES, question_shape

__all__ = ["SHAPES", "question_shape"]
