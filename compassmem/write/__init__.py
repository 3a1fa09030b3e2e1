"""The write path's wiring (MemoryPipeline), the conversation file readers and redaction."""
