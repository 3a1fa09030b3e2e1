"""The records, settings, errors, logging and tracing every layer shares."""
