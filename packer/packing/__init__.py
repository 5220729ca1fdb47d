"""Packing: a source scanned, read in workers, written by a format (pipeline.py)."""
