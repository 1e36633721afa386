"""The GGUF metadata reader: the same values as the ``gguf`` package's reader (llama.cpp's own
gguf-py), shards, mmproj files, and hostile files refused in bounded time with the key and the
byte offset named."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from qwen_encode.errors import CheckpointError
from qwen_encode.gguf_reader import MAX_STRING_BYTES, first_shard, read_gguf
from tests.gguf_files import TINY, make_gguf, write_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_values_equal_the_gguf_package_reader(tiny_gguf: Path) -> None:
    import gguf

    oracle = gguf.GGUFReader(tiny_gguf)
    meta = read_gguf(tiny_gguf)
    expected = {
        key: field.contents() for key, field in oracle.fields.items() if not key.startswith("GGUF.")
    }
    got = {key: list(v) if isinstance(v, tuple) else v for key, v in meta.values.items()}
    assert got == expected
    assert meta.version == 3
    assert meta.tensor_count == 0
    assert meta.types["tokenizer.ggml.tokens"] == "array[string]"
    assert meta.types["tokenizer.ggml.token_type"] == "array[int32]"
    # Each key's offset is where its key string starts: the byte holding its length.
    data = tiny_gguf.read_bytes()
    for key, offset in meta.offsets.items():
        (length,) = struct.unpack_from("<Q", data, offset)
        assert data[offset + 8 : offset + 8 + length].decode() == key


def test_big_endian_file(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(str(path), arch="qwen35", endianess=gguf.GGUFEndian.BIG)
    writer.add_array("tokenizer.ggml.token_type", [1, 3, 4])
    writer.add_string("tokenizer.ggml.pre", "qwen35")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    meta = read_gguf(path)
    assert meta.values["tokenizer.ggml.token_type"] == (1, 3, 4)
    assert meta.values["tokenizer.ggml.pre"] == "qwen35"


def test_shard_two_reads_shard_one(tiny_gguf: Path, tmp_path: Path) -> None:
    first = tmp_path / "model-00001-of-00002.gguf"
    first.write_bytes(tiny_gguf.read_bytes())
    second = tmp_path / "model-00002-of-00002.gguf"
    second.write_bytes(b"GGUF" + b"\0" * 40)  # shard 2 holds no tokenizer: never read
    assert first_shard(second) == first
    assert read_gguf(second).path == first
    first.unlink()
    with pytest.raises(CheckpointError, match=r"shard 2 of 2.*model-00001-of-00002\.gguf"):
        read_gguf(second)


def test_mmproj_refused_saying_what_it_is(tmp_path: Path) -> None:
    def mmproj(fields: dict) -> None:
        fields["general.type"][0] = "mmproj"

    path = write_gguf(TINY, tmp_path / "mmproj-model-f16.gguf", mmproj)
    with pytest.raises(CheckpointError, match=r"an mmproj file .*--mmproj.*model's GGUF"):
        read_gguf(path)


# --- hostile files ------------------------------------------------------------------------------


def _header(kv_count: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, 0, kv_count)


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _refused(tmp_path: Path, data: bytes, pattern: str) -> CheckpointError:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=pattern) as caught:
        read_gguf(path)
    assert time.perf_counter() - start < 1.0  # refused before any work proportional to a claim
    return caught.value


def test_truncated_everywhere(tiny_gguf: Path, tmp_path: Path) -> None:
    data = tiny_gguf.read_bytes()
    for cut in (3, 10, 23, 30, 60, 200, len(data) // 2, len(data) - 1):
        _refused(tmp_path, data[:cut], r"hostile\.gguf")


def test_string_length_past_the_end_names_key_and_offset(tmp_path: Path) -> None:
    data = _header(1) + _string(b"tokenizer.ggml.pre") + struct.pack("<IQ", 8, 1 << 40)
    error = _refused(
        tmp_path, data, r"'tokenizer\.ggml\.pre' at byte 54: the string value declares"
    )
    assert str(1 << 40) in str(error).replace(",", "")


def test_string_over_the_ceiling(tmp_path: Path) -> None:
    data = _header(1) + _string(b"k") + struct.pack("<IQ", 8, MAX_STRING_BYTES + 1)
    _refused(tmp_path, data, r"'k' at byte .*more than the")


def test_array_count_past_the_end(tmp_path: Path) -> None:
    data = _header(1) + _string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 50)
    _refused(tmp_path, data, r"'tokenizer\.ggml\.tokens' at byte .*more than the file can hold")


def test_array_element_length_past_the_end(tmp_path: Path) -> None:
    items = _string(b"a") + struct.pack("<Q", 1 << 62)
    data = _header(1) + _string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + items
    _refused(tmp_path, data, r"'tokenizer\.ggml\.tokens' at byte .*element 1 declares")


def test_key_count_past_the_end(tmp_path: Path) -> None:
    _refused(tmp_path, _header(1 << 60), r"the header at byte .*key-values")


def test_nested_array_unknown_type_duplicate_key_non_utf8(tmp_path: Path) -> None:
    nested = _header(1) + _string(b"n") + struct.pack("<IIQ", 9, 9, 1) + b"\0" * 16
    _refused(tmp_path, nested, r"'n' at byte .*nested arrays")
    unknown = _header(1) + _string(b"u") + struct.pack("<I", 99) + b"\0" * 16
    _refused(tmp_path, unknown, r"'u' at byte .*unknown value type 99")
    scalar = struct.pack("<II", 4, 7)
    twice = _header(2) + _string(b"d") + scalar + _string(b"d") + scalar + b"\0" * 16
    _refused(tmp_path, twice, r"'d' at byte 41: a key present twice")
    bad = _header(1) + _string(b"s") + struct.pack("<I", 8) + _string(b"\xff\xfe") + b"\0" * 16
    _refused(tmp_path, bad, r"'s' at byte .*not UTF-8")


def test_not_a_gguf(tmp_path: Path) -> None:
    _refused(tmp_path, b"{" + b" " * 40, r"not the GGUF magic")
    _refused(tmp_path, _header(0, version=1) + b"\0" * 16, r"GGUF version 1")


def test_real_vocabulary_metadata_read_in_bounded_time(
    qwen38_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    make_gguf()
    path = write_gguf(qwen38_dir, tmp_path_factory.mktemp("real") / "qwen3.8.gguf")
    meta = read_gguf(path)
    assert len(meta.values["tokenizer.ggml.tokens"]) == 248_320
    assert len(meta.values["tokenizer.ggml.merges"]) == 247_587
    assert meta.values["tokenizer.ggml.tokens"][248_046] == "<|im_end|>"
