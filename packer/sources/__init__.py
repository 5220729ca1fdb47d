"""Sources: what can be packed. Each source module gives an object with

    kind, count, input_bytes, classes, label_source, fingerprint
    field_specs    {field: {"dtype": "bytes" | "int64" | "float32" ..., "shape": [...]}}
    scan_skipped   inputs found bad before reading, [{"path", "reason"}]
    jobs(start, size, check)   picklable units of work covering samples start..count
    describe(options)          the manifest's "source" entry and source-specific extras

and a module-level `read_job(job) -> [(sample or None, skip entries), ...]` that a
packing worker runs. A source may also offer `blocks(start)`: its samples as
column arrays, which HDF5 stores without a per-sample step. A sample is a dict
`{"__key__": str, FIELD: value}` whose values are bytes, ints or numpy arrays.
"""

from pathlib import Path

from packer.sources.files.scan import read_job, scan_folder
from packer.tables import TABLE_SUFFIXES


def is_table(path: Path) -> bool:
    """A file that the tables source reads: CSV, TSV, .txt, Excel or Parquet, by suffix."""
    return Path(path).is_file() and Path(path).suffix.lower() in TABLE_SUFFIXES


def open_source(path: Path, options):
    """The source for `path`, and the function its jobs are read with in the workers."""
    if options.spec:
        from packer.sources.binary.source import open_binary

        return open_binary(path, options)
    if is_table(path):
        from packer.sources.tables.source import open_table_source

        return open_table_source(path, options)
    scan = scan_folder(path, labels=options.labels, unlabelled=options.unlabelled,
                       group_by_stem=options.group_by_stem,
                       follow_symlinks=options.follow_symlinks,
                       labels_encoding=options.encoding)
    return scan, read_job
