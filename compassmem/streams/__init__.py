"""Kafka topics, Faust agents (thin adapters over the processors), producers and the dev broker."""
