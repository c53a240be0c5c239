"""Benchmarks: the engine, the codecs, the data-plane transports."""
