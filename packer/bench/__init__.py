"""`packer bench`: readers of the same samples measured side by side (measure), with
what the operating system tells of each run (probes: the page cache, peak memory)."""
