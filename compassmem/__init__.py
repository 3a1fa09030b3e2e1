"""compassmem: an event-graph long-term memory for LLM agents, fed by a stream."""

__version__ = "0.1.0"
