"""Vector and graph stores behind small interfaces, and the batching sinks that write to them."""
