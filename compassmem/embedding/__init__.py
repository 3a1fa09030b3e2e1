"""The text embedders: the interface, the sentence-transformers reference and the int8 ONNX embedder."""
