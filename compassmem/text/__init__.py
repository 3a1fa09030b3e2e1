"""Text analysis (keywords, lexicon, categories, time expressions, passages) shared by the processors, the stores, the read side and the LLM steps."""
