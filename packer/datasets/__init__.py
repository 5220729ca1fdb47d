"""The dataset tools, above the reading side: verify (every part against the manifest,
or the source), unpack (a dataset back to its files) and info (what `packer inspect`
shows, as a library function)."""
