"""The records reader (issue 40): every format (plain CSV, compressed CSV, Parquet) goes through the
same checks, and no error message quotes a value read from the records."""

import bz2
import gzip
import io
import json
import lzma
import random
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from querysmasher.data import load_records
from querysmasher.errors import InputError
from querysmasher.schema import parse_schema

SYNTHETIC = parse_schema("synthetic:n=4,d=3")  # a0, a1, a2 holding codes 0..3
GOOD = [["a0", "a1", "a2"], ["0", "1", "2"], ["3", "3", "0"], ["1", "0", "3"]]
# A domain of raw values: category names and bin edges are the domain's, not the records'.
DOMAIN = {
    "color": {"categories": ["crimson", "teal", "ochre"]},
    "size": {"categories": ["small", "large"]},
    "age": {"bins": [0, 18, 65, 120]},
}
RAW = [["color", "size", "age"], ["ochre", "large", "37"], ["teal", "small", "17"], ["crimson", "large", "120"]]
RAW_CODES = [[2, 1, 1], [1, 0, 0], [0, 1, 2]]


def _zip(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("records.csv", data)
    return out.getvalue()


def _zstd(data: bytes) -> bytes:
    return pytest.importorskip("zstandard").ZstdCompressor().compress(data)


COMPRESS = {
    ".csv": bytes,
    ".csv.gz": gzip.compress,
    ".csv.bz2": bz2.compress,
    ".csv.xz": lzma.compress,
    ".csv.zip": _zip,
    ".csv.zst": _zstd,
}
TEXT = list(COMPRESS)
FORMATS = TEXT + [".parquet"]
COMPRESSED = TEXT[1:]


def _with_blank_lines(counts):
    """(suffix, blank lines before the header) for every format: Parquet has no lines."""
    return [(s, n) for s in FORMATS for n in counts if n == 0 or s != ".parquet"]


def _write(folder: Path, suffix: str, rows: list[list[str]], blank_lines: int = 0) -> Path:
    """A records file of ``rows`` (the header first); Parquet holds every column as strings."""
    path = folder / f"records{suffix}"
    if suffix == ".parquet":
        header, *body = rows
        columns = [pa.array([r[i] for r in body], pa.string()) for i in range(len(header))]
        pq.write_table(pa.table(columns, names=header), path)  # pyarrow, unlike pandas, writes a name twice
    else:
        path.write_bytes(COMPRESS[suffix](("\n" * blank_lines + "".join(",".join(r) + "\n" for r in rows)).encode()))
    return path


@pytest.fixture()
def domain(tmp_path):
    path = tmp_path / "dom.json"
    path.write_text(json.dumps(DOMAIN))
    return parse_schema(str(path)), path


def _refused(path: Path, schema, **kw) -> str:
    """The InputError's message, without the file's path (chosen by the test, not read from it)."""
    with pytest.raises(InputError) as exc:
        load_records(path, schema, **kw)
    return str(exc.value).replace(str(path), "<path>")


def _quotes_none(message: str, cells) -> None:
    quoted = [c for c in cells if c in message]
    assert not quoted, (quoted, message)


# ------------------------------------------------------------------------------ good files read alike


@pytest.mark.parametrize("suffix, blank_lines", _with_blank_lines([0, 2]))
def test_good_codes_read_identically_in_every_format(tmp_path, suffix, blank_lines):
    records = load_records(_write(tmp_path, suffix, GOOD, blank_lines), SYNTHETIC)
    assert records.codes.tolist() == [[int(v) for v in r] for r in GOOD[1:]] and records.dropped == 0


@pytest.mark.parametrize("suffix", FORMATS)
def test_good_raw_values_encode_identically_in_every_format(tmp_path, domain, suffix):
    schema, dom = domain
    columns = [RAW[0][i] for i in (2, 0, 1)]  # columns in another order than the schema's, and one more
    rows = [columns + ["note"]] + [[r[RAW[0].index(c)] for c in columns] + ["x"] for r in RAW[1:]]
    assert load_records(_write(tmp_path, suffix, rows), schema, domain_file=dom).codes.tolist() == RAW_CODES


# ------------------------------------------------------------------------------ duplicated columns


@pytest.mark.parametrize("suffix, blank_lines", _with_blank_lines([0, 1, 3]))
def test_a_duplicated_attribute_is_refused_in_every_format(tmp_path, suffix, blank_lines):
    path = _write(tmp_path, suffix, [["a0", "a1", "a2", "a1"], ["0", "1", "2", "3"]], blank_lines)
    assert "names the column 'a1' twice" in _refused(path, SYNTHETIC)


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_duplicated_column_that_is_no_attribute_is_named_by_position(tmp_path, suffix):
    path = _write(tmp_path, suffix, [["a0", "QZsecret", "a1", "a2", "QZsecret"], ["0", "9", "1", "2", "9"]], 1)
    message = _refused(path, SYNTHETIC)
    assert "columns 2 and 5 have the same name" in message
    _quotes_none(message, ["QZsecret"])


# ------------------------------------------------------------------------------ headerless files


@pytest.mark.parametrize("first", [["ochre", "large", "37"], ["teal", "small", "forty"]], ids=["number", "no number"])
@pytest.mark.parametrize("suffix", FORMATS)
def test_a_headerless_file_is_refused_without_quoting_its_first_record(tmp_path, domain, suffix, first):
    schema, dom = domain
    path = _write(tmp_path, suffix, [first, *RAW[1:]])
    message = _refused(path, schema, domain_file=dom)
    assert "is not a header" in message and "header line missing" in message
    _quotes_none(message, [c for r in [first, *RAW[1:]] for c in r])


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_headerless_file_of_codes_is_refused_without_quoting_them(tmp_path, suffix):
    rows = [["307", "1", "2"], ["0", "211", "2"]]  # codes out of the domain, so that a quote would show
    message = _refused(_write(tmp_path, suffix, rows, 1), SYNTHETIC)
    assert "is not a header" in message and "3 of its 3 cells are numbers" in message
    _quotes_none(message, ["307", "211"])


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_missing_attribute_is_named_and_the_other_columns_counted(tmp_path, suffix):
    message = _refused(_write(tmp_path, suffix, [["a0", "QZage", "a2"], ["0", "1", "2"]]), SYNTHETIC)
    assert "missing column(s) 'a1'" in message and "other 1 columns are not schema attributes" in message
    _quotes_none(message, ["QZage"])


# ------------------------------------------------------------------------------ values never quoted


@pytest.mark.parametrize(
    "column, value, needle",
    [
        ("color", "magenta", "1 rows hold a value not in the category list of 'color' (first data rows: 2)"),
        ("size", "QZmedium", "1 rows hold a value not in the category list of 'size' (first data rows: 2)"),
        ("age", "130.5", "1 rows fall outside the bins [0, 120] (first data rows: 2)"),
        ("age", "-7.25", "1 rows fall outside the bins [0, 120] (first data rows: 2)"),
        ("age", "QZold", "1 rows are not numbers (first data rows: 2)"),
    ],
)
@pytest.mark.parametrize("suffix", FORMATS)
def test_a_value_outside_the_domain_is_counted_never_quoted(tmp_path, domain, suffix, column, value, needle):
    schema, dom = domain
    rows = [list(r) for r in RAW]
    rows[2][RAW[0].index(column)] = value
    path = _write(tmp_path, suffix, rows)
    message = _refused(path, schema, domain_file=dom)
    assert needle in message and f"'{column}'" in message
    _quotes_none(message, [value])
    dropped = load_records(path, schema, domain_file=dom, on_invalid="drop")
    assert dropped.codes.tolist() == [RAW_CODES[0], RAW_CODES[2]] and dropped.dropped == 1


# ------------------------------------------------------------------------------ unreadable files


@pytest.mark.parametrize("suffix", COMPRESSED + [".parquet"])
def test_a_file_that_is_not_what_its_suffix_says_is_refused_without_quoting_it(tmp_path, suffix):
    path = tmp_path / f"records{suffix}"
    path.write_text("QZsecret,37\n0,1\n")  # plain text: gzip's own message quotes its first bytes
    message = _refused(path, SYNTHETIC)
    assert "cannot be read as" in message
    _quotes_none(message, ["QZ", "37"])


def test_a_zip_of_two_files_is_refused_without_naming_them(tmp_path):
    path = tmp_path / "records.csv.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("QZalice.csv", "a0,a1,a2\n0,1,2\n")
        z.writestr("QZbob.csv", "a0,a1,a2\n0,1,2\n")
    message = _refused(path, SYNTHETIC)
    assert "Multiple files found in ZIP file" in message
    _quotes_none(message, ["QZ"])


def test_a_zstd_file_without_zstandard_says_what_is_missing(tmp_path):
    try:
        import zstandard  # noqa: F401
    except ImportError:
        path = tmp_path / "records.csv.zst"
        path.write_bytes(b"\x28\xb5\x2f\xfd")
        assert "zstandard" in _refused(path, SYNTHETIC)
    else:
        pytest.skip("zstandard is installed: .zst files are read (the format tests)")


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_corrupted_file_is_one_input_error_never_quoting_it(tmp_path, suffix):
    """Truncated or with flipped bytes: every variant loads or is one InputError, never a traceback
    (a decompressor's EOFError, LZMAError, zlib.error or ZstdError, pyarrow's OSError or KeyError)."""
    rows = [["a0", "a1", "a2", "note"]] + [["1", "2", "3", f"QZ{i:03d}"] for i in range(40)]
    good = _write(tmp_path, suffix, rows).read_bytes()
    rng = random.Random(suffix)
    path = tmp_path / f"bad{suffix}"
    for variant in range(60):
        data = bytearray(good)
        if variant % 3 == 0:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            load_records(path, SYNTHETIC)
        except InputError as exc:
            _quotes_none(str(exc).replace(str(path), "<path>"), ["QZ"])


# ------------------------------------------------------------------------------ fuzzed CSV text

FUZZ_DOMAIN = {"a0": 4, "a1": {"categories": ["yak", "gnu", "ox"]}, "a2": {"bins": [0, 10, 20]}}
CELL = st.one_of(
    st.sampled_from(["a0", "a1", "a2", "yak", "gnu", "ox", "", "nan", "NA", " 1", '"']),
    st.sampled_from(["1.5", "-0.25", "1e3", "1e400", "0x1"]),
    st.integers(-1200, 1200).map(str),
    st.text("QZJKWX", min_size=1, max_size=5),  # letters no message uses, so that a quote would show
)
HEADER = st.one_of(
    st.permutations(["a0", "a1", "a2"]).map(list),
    st.lists(st.sampled_from(["a0", "a1", "a2", "", "QZJ", "WXK", "7"]), max_size=5),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.none() | HEADER,
    rows=st.lists(st.lists(CELL, max_size=5), max_size=6),
    blank_lines=st.integers(0, 2),
    suffix=st.sampled_from([".csv", ".csv.gz", ".csv.zip"]),
    encoded=st.booleans(),
    on_invalid=st.sampled_from(["error", "drop"]),
)
def test_fuzzed_csv_loads_or_is_one_input_error_quoting_no_cell(
    tmp_path, header, rows, blank_lines, suffix, encoded, on_invalid
):
    """Random small CSV texts (with or without a header, blank lines, ragged rows, stray quotes) either
    load or raise an InputError, never another exception; the message holds no cell of 3 or more
    characters read from the file, besides the names the domain gave (attributes and categories)."""
    domain = tmp_path / "fuzz.json"
    domain.write_text(json.dumps(FUZZ_DOMAIN))
    schema = parse_schema(str(domain)) if encoded else SYNTHETIC
    lines = ([header] if header is not None else []) + rows
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(COMPRESS[suffix](("\n" * blank_lines + "\n".join(",".join(r) for r in lines)).encode()))
    try:
        load_records(path, schema, domain_file=domain if encoded else None, on_invalid=on_invalid)
    except InputError as exc:
        given_names = set(schema.names) | set(FUZZ_DOMAIN["a1"]["categories"])
        cells = {c for r in lines for c in r if len(c) >= 3} - given_names
        _quotes_none(str(exc).replace(str(path), "<path>"), cells)
