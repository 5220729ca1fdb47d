"""The sample model, shared by every source and format.

A sample is a dict `{"__key__": str, FIELD: value, ...}`, the WebDataset convention;
a field's name says its encoding (`jpg`, `png`, `cls` (an int class id), `json`,
`txt`, `npy` (an array)). A value is bytes, an int or a numpy array; `field_bytes`
gives its canonical bytes, `sample_digest` a digest that no format changes.

Keys are reversible names that survive the WebDataset `KEY.FIELD` split. A file's
key is its path relative to the packed folder, without its extension, with `%`, `.`
and `~` percent-escaped (and bytes that are not UTF-8 escaped as `%XX`), so a key
never holds a dot and the first dot of a tar member name always separates key from
field. `~` is reserved: when several files share a stem and are packed as separate
samples, their keys become `STEM~EXT`, and `~EXT` is dropped again when the path is
restored. A sample with no path (a table row, a record of a dump) is keyed by its
index, `index_key(i)`, zero-padded to 10 digits.
"""

import hashlib
import io
import re
from urllib.parse import unquote

KEY = "__key__"
SIDECAR_FIELDS = frozenset({"json", "txt", "cls"})  # notes on a file of the same stem
LAYOUT_VERSION = 3  # 2: a binary dump in HDF5 is stored as its records; 3: an LMDB append
# keeps its samples in a file of its own (gen-000001.mdb), which packer 2 would call damaged
INDEX_KEY = "%010d"  # the key of sample i where its source gives none
INDEX_KEY_BYTES = INDEX_KEY.encode()
# Encoded image fields, by extension; and the field of images stored as uint8 pixels
# (height x width x 3, a .npy array) by `packer pack --encode raw`
IMAGE_FIELDS = frozenset({"jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff", "ppm",
                          "pgm"})
RAW_IMAGE_FIELD = "rgb.npy"

# Every raster format Pillow opens, by file extension (Image.registered_extensions()),
# leaving out the ones it only identifies (HDF5, GRIB, BUFR, WMF), EPS (which needs
# Ghostscript), MPEG and IPTC: these fields are images, for `--check decode` and for the
# loader's decoding. An MPO opens as a JPEG.
PIL_FORMATS = {
    "apng": "PNG", "avif": "AVIF", "avifs": "AVIF", "blp": "BLP", "bmp": "BMP",
    "bw": "SGI", "cur": "CUR", "dcx": "DCX", "dds": "DDS", "dib": "DIB", "fit": "FITS",
    "fits": "FITS", "flc": "FLI", "fli": "FLI", "ftc": "FTEX", "ftu": "FTEX", "gbr": "GBR",
    "gif": "GIF", "icb": "TGA", "icns": "ICNS", "ico": "ICO", "im": "IM", "j2c": "JPEG2000",
    "j2k": "JPEG2000", "jfif": "JPEG", "jp2": "JPEG2000", "jpc": "JPEG2000", "jpe": "JPEG",
    "jpeg": "JPEG", "jpf": "JPEG2000", "jpg": "JPEG", "jpx": "JPEG2000", "mpo": "JPEG",
    "msp": "MSP", "pbm": "PPM", "pcd": "PCD", "pcx": "PCX", "pfm": "PPM", "pgm": "PPM",
    "png": "PNG", "pnm": "PPM", "ppm": "PPM", "psd": "PSD", "pxr": "PIXAR", "qoi": "QOI",
    "ras": "SUN", "rgb": "SGI", "rgba": "SGI", "sgi": "SGI", "tga": "TGA", "tif": "TIFF",
    "tiff": "TIFF", "vda": "TGA", "vst": "TGA", "webp": "WEBP", "xbm": "XBM", "xpm": "XPM",
}

# The shapes in which a source offers its samples, and a format's writer takes them:
SAMPLES = "samples"  # dicts, one by one (every source and every format)
COLUMNS = "columns"  # blocks of column arrays, samples keyed by their index
RECORDS = "records"  # a dump's records copied whole, samples keyed by their index


def index_key(index: int) -> str:
    """`7` -> `0000000007`: the key of a sample known by its index."""
    return INDEX_KEY % index


def index_keys(first: int, count: int) -> list[str]:
    """The keys of samples first .. first+count-1."""
    return [INDEX_KEY % i for i in range(first, first + count)]


def field_bytes(value) -> bytes:
    """The canonical bytes of a field value: an int as its decimal text (a class id),
    an array as a .npy file."""
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _npy_bytes(value)


def npy_header_size(data) -> int:
    """Bytes of the header of a version 1.0 .npy file `data` (0 if it is not one)."""
    if bytes(data[:7]) != b"\x93NUMPY\x01" or len(data) < 10:
        return 0
    return 10 + int.from_bytes(data[8:10], "little")


def _npy_bytes(array) -> bytes:
    import numpy as np  # here, so that packing plain files never loads numpy

    if not isinstance(array, np.ndarray):
        raise TypeError(f"cannot store a {type(array).__name__} as a field")
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def value_size(value) -> int:
    """Bytes of data a field value holds (0 for a class id)."""
    if isinstance(value, int):
        return 0
    return value.nbytes if hasattr(value, "nbytes") else len(value)


def msgpack_default(value):
    """Lets msgpack carry arrays, as .npy bytes."""
    return _npy_bytes(value)


def columns_crc32(columns: dict, crc: int = 0) -> int:
    """The checksum of a block of samples given as column arrays (fields in name
    order): the CRC-32 of zlib.crc32, computed by ISA-L (several times faster)."""
    import numpy as np  # column blocks are numpy arrays; plain files never come here
    from isal.isal_zlib import crc32

    for name in sorted(columns):
        crc = crc32(np.ascontiguousarray(columns[name]).data, crc)
    return crc


def column_samples(keys: list[str], columns: dict) -> list[tuple[dict, list]]:
    """Samples from a block of column arrays, one per key (the SAMPLES shape, as a
    source's read_job gives them): row i of each column as an array, the class id
    `cls` as an int, last."""
    import numpy as np  # column blocks are numpy arrays; plain files never come here

    labels = columns.get("cls")
    fields = {name: column for name, column in columns.items() if name != "cls"}
    samples = []
    for i, key in enumerate(keys):
        sample = {KEY: key}
        sample.update((name, np.asarray(column[i])) for name, column in fields.items())
        if labels is not None:
            sample["cls"] = int(labels[i])
        samples.append((sample, []))
    return samples


def values_crc32(records) -> int:
    """The CRC-32 of a structured array's field values as a reader gets them: each field
    converted by value into this machine's byte order, padding left out. Computed from
    the source records as their spec declares them and from the stored ones alike, it
    differs where the stored bytes are in another order than their dtype says."""
    import numpy as np
    from isal.isal_zlib import crc32

    dtype = records.dtype
    packed = np.dtype([(name, dtype.fields[name][0].newbyteorder("="))
                       for name in dtype.names])
    return crc32(np.ascontiguousarray(records.astype(packed)).view(np.uint8).data)


def native_order(dtype) -> bool:
    """Whether every number of `dtype` is in this machine's byte order. numpy's own
    `isnative` passes over a field with a shape: [('frame', '>i2', (2,))] is native to it."""
    if dtype.subdtype is not None:
        return native_order(dtype.subdtype[0])
    if dtype.names is not None:
        return all(native_order(dtype.fields[name][0]) for name in dtype.names)
    return dtype.isnative


def sample_digest(sample: dict) -> bytes:
    """sha256 of the key, then each field's name, length and bytes in name order."""
    parts = [sample[KEY].encode(), b"\0"]
    for name in sorted(k for k in sample if k != KEY):
        data = field_bytes(sample[name])
        parts += (name.encode(), b"\0", len(data).to_bytes(8, "little"), data)
    return hashlib.sha256(b"".join(parts)).digest()


def content_digest(sample: dict) -> bytes:
    """sha256 of what a sample holds, not what it is called or said of it: each field's
    length and bytes in name order, leaving out the key, the class id and the sidecar
    notes (.json, .txt) of a sample that has other fields (the same photo as a.jpg and
    b.jpeg, under two classes, or with a caption, is one content)."""
    digest = hashlib.sha256()
    names = sorted(k for k in sample if k not in (KEY, "cls"))
    held = [name for name in names if name.lower() not in SIDECAR_FIELDS]
    for name in held or names:
        data = field_bytes(sample[name])
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


_ESCAPED = {"%", ".", "~"}
_NEEDS_ESCAPE = re.compile("[%.~\udc80-\udcff]")
DISAMBIGUATOR = "~"
NO_EXTENSION_FIELD = "_"  # the field of a file that has no extension


def encode_key(stem_path: str) -> str:
    """`cats/my.photo 1` -> `cats/my%2Ephoto 1`; the inverse is `decode_key`."""
    if not _NEEDS_ESCAPE.search(stem_path):
        return stem_path
    out = []
    for char in stem_path:
        code = ord(char)
        if char in _ESCAPED:
            out.append(f"%{code:02X}")
        elif 0xDC80 <= code <= 0xDCFF:  # a raw byte of a name that is not UTF-8
            out.append(f"%{code - 0xDC00:02X}")
        else:
            out.append(char)
    return "".join(out)


def disambiguate(key: str, field: str) -> str:
    """The key of one of several files that share a stem but are separate samples."""
    return f"{key}{DISAMBIGUATOR}{encode_key(field)}"


def decode_key(key: str) -> str:
    """The stem path a key was made from (without any `~EXT` disambiguator)."""
    return unquote(key.split(DISAMBIGUATOR, 1)[0], errors="surrogateescape")


def split_name(name: str) -> tuple[str, str]:
    """`stem.ext` -> (stem, escaped ext); a name with no extension gets field `_`."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not ext:  # `README`, `.profile`, `name.`
        return name, NO_EXTENSION_FIELD
    return stem, encode_key(ext)


def restored_path(key: str, field: str) -> str:
    """The relative path a sample's field came from (fields are escaped like keys)."""
    stem = decode_key(key)
    return stem if field == NO_EXTENSION_FIELD else f"{stem}.{decode_key(field)}"


def split_member(member: str) -> tuple[str, str]:
    """A tar member `dir/KEY.FIELD` -> (`dir/KEY`, `FIELD`), as webdataset splits it."""
    folder, slash, base = member.rpartition("/")
    key, _, field = base.partition(".")
    return folder + slash + key, field
