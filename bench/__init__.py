"""Benchmarks: `mrope-tracker bench` (installed as mrope_tracker.bench)."""
