"""Prometheus metrics for the worker and the API."""
