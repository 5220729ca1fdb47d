"""What a source kind declares, and what the source it scans offers packing.

A source kind is a package in packer/sources/ (files, tables, binary) whose
`__init__.py` is light (no numpy, pandas or h5py: the registry imports every kind to
ask which one claims a path) and declares:

    NAME         the kind's name
    KINDS        {kind: Kind}: the kinds of input it takes (a folder, a CSV, a dump ...)
    OPTIONS      {pack option: Applies}: which of its kinds read each option
    OPTIONS_MODULE  the module holding `Options`, the dataclass of the options it reads
                 (a KindOptions: packer/sources/options.py), and `click_options`, the
                 decorator that adds them to `packer pack`
    UNCLAIMED    what a path must be for this kind, for the error when no kind claims it
    RECORDED_AS  the manifest's `source.kind` values its sources write
    claims(path, spec) -> kind or None
    claims_url(url, spec, one_object) -> the kind an s3:// URL is taken for, or None;
                 `one_object`: the URL is the key of an object, which packing copies to
                 the cache and scans as a local file (otherwise a prefix, which the kind's
                 scan_input takes as the URL)
    scan_input(path, options) -> (Source, read_job): the scanned input, and the
                 module-level function a packing worker runs on each of its jobs;
                 `options` is a PackOptions, whose `source` is this kind's Options
    summary_text(manifest) -> what a pack summary adds for this kind, or None
    against      None, or against(manifest, folder) -> a comparer whose check(sample)
                 lists how a packed sample differs from its source file, and whose
                 unaccounted(manifest) lists source files neither packed nor skipped
                 (`packer verify --against`)
    AGAINST_FILES  optional, False unless declared: whether `against` takes a file
                 (a table, a dump) and checks the path itself; otherwise --against
                 must be a folder
"""

from typing import NamedTuple

from packer.sample import KEY, SAMPLES


class Kind(NamedTuple):
    taken_for: str  # "a folder of files": what SOURCE was taken for
    plural: str  # "folders of files without --spec": the kind in a list of kinds
    group: str | None = None  # the name of the kinds it shares it with, when all are meant


class Applies(NamedTuple):
    kinds: frozenset  # the kinds that read the option
    needs: dict = {}  # kind: another option without which this one is not read


class Source:
    """A scanned input, as packing uses it (each source kind's scan gives one):

    kind, path, count, input_bytes, classes, label_source, fingerprint
    field_specs   {field: {"dtype": "bytes" | "int64" | "float32" ..., "shape": [...]}}
    scan_skipped  inputs found bad before reading, [{"path", "reason"}]
    jobs(start, size, check)  picklable units of work covering samples start..count
    source_record(options)    the manifest's "source" entry and source-specific extras

    and the defaults below. SHAPES lists the sample shapes it offers, preferred first
    (packer.sample): SAMPLES through jobs always; COLUMNS through `blocks(start)`,
    blocks of column arrays with their `columns_crc32`; RECORDS through
    `records_layout()`, `record_dtype`, `write_records(start, stop, fd, offset)`,
    `values_crc32(start, stop)` and `sample_labels(first, count)`, a dump's records
    copied whole.
    """

    SHAPES: tuple[str, ...] = (SAMPLES,)
    key_dataset = KEY  # what a format that names its columns calls the keys
    attrs: dict = {}  # what a format that keeps attributes records beside the data
    unmatched_labels: list = []  # labels-file rows that name no input

    def modified_since(self, time_ns: int, count: int) -> str | None:
        """The first input of the first `count` samples modified after `time_ns`, where
        the source can tell (a resumed pack refuses a changed input)."""
        return None
