"""The OpenAI-compatible LLM client and the write path's optional LLM steps."""
