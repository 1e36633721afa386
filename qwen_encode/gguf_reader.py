"""Reading a GGUF file's metadata (header and key-values) without the ``gguf`` package.

Only what the tokenizer and its validation need is read: the header, every key-value, and the
shape of ``token_embd.weight`` among the tensor descriptions; tensor data is never touched. The
file is memory-mapped, and every length a hostile file declares (a string's, an array's, the
number of keys) is checked against the bytes left in the file, and against a fixed ceiling,
before anything is allocated: a bad file is a ``CheckpointError`` naming the key and the byte
offset, in time and memory bounded by the metadata's real size. The ``gguf`` package's reader
builds a numpy view per array element (15-19 s and ~944 MB on a 248k-token vocabulary); this one
decodes strings straight from the mapping.

The layout is llama.cpp's ``ggml/src/gguf.cpp``: magic ``GGUF``, version (2 or 3), tensor count
and key-value count (u64), then per key: a string (u64 length + UTF-8 bytes), a u32 type, the
value; an array is a u32 element type, a u64 count, the elements. Nested arrays are refused, as
``gguf.cpp`` refuses them.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from .checkpoint import FILE, path_kind
from .errors import CheckpointError

GGUF_MAGIC: Final = b"GGUF"
#: A single string value longer than this is refused: 64 MiB, thousands of times a real chat
#: template (9 KB) and far beyond any token (a few hundred bytes).
MAX_STRING_BYTES: Final = 64 << 20
#: An array with more elements than this is refused: 64 M, 250 times a 256k vocabulary.
MAX_ARRAY_ITEMS: Final = 64 << 20
#: More keys than this is refused (real files hold 40-60).
MAX_KEYS: Final = 1 << 20
#: More tensor descriptions than this are not scanned for the embedding (real models: < 10k).
MAX_TENSORS_SCANNED: Final = 1 << 20

# GGUF value types (gguf.cpp enum gguf_type): struct format and size of each scalar.
_SCALARS: Final[Mapping[int, tuple[str, int]]] = {
    0: ("B", 1),  # UINT8
    1: ("b", 1),  # INT8
    2: ("H", 2),  # UINT16
    3: ("h", 2),  # INT16
    4: ("I", 4),  # UINT32
    5: ("i", 4),  # INT32
    6: ("f", 4),  # FLOAT32
    7: ("?", 1),  # BOOL
    10: ("Q", 8),  # UINT64
    11: ("q", 8),  # INT64
    12: ("d", 8),  # FLOAT64
}
_STRING: Final = 8
_ARRAY: Final = 9
_TYPE_NAMES: Final = {
    0: "uint8",
    1: "int8",
    2: "uint16",
    3: "int16",
    4: "uint32",
    5: "int32",
    6: "float32",
    7: "bool",
    8: "string",
    9: "array",
    10: "uint64",
    11: "int64",
    12: "float64",
}
# gguf-split names shards "<stem>-00001-of-00004.gguf"; the metadata the tokenizer needs is in
# the first one (gguf-split writes the key-values there only).
_SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class GGUFMetadata:
    """A GGUF file's header and key-values. ``values`` maps each key to a str, int, float, bool,
    or a tuple of them (arrays); ``types`` to its GGUF type name ("string", "array[int32]"...);
    ``offsets`` to the byte offset of its key. ``embedding_rows`` is the row count of
    ``token_embd.weight`` when the file describes that tensor, else None. ``metadata_sha256``
    hashes the header and key-values (what everything derived from them depends on)."""

    path: Path
    version: int
    tensor_count: int
    values: Mapping[str, Any]
    types: Mapping[str, str]
    offsets: Mapping[str, int]
    embedding_rows: int | None
    metadata_sha256: str
    shard: tuple[int, int] | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def where(self, key: str) -> str:
        """``key`` and where it is, for messages: "tokenizer.ggml.pre (byte 1,234)"."""
        offset = self.offsets.get(key)
        return key if offset is None else f"{key} (byte {offset:,})"


def is_gguf_path(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts with the GGUF magic."""
    if path_kind(path) != FILE:
        return False
    try:
        with path.open("rb") as handle:
            return handle.read(4) == GGUF_MAGIC
    except OSError:
        return False


def first_shard(path: Path) -> Path:
    """The shard holding the metadata: ``path`` itself unless it is shard k > 1 of a gguf-split
    set, whose shard 1 must then sit beside it."""
    match = _SHARD.match(path.name)
    if match is None or int(match["no"]) == 1:
        return path
    first = path.with_name(f"{match['stem']}-00001-of-{match['count']}.gguf")
    if path_kind(first) != FILE:
        raise CheckpointError(
            f"{path}: shard {int(match['no'])} of {int(match['count'])}; the tokenizer is in the "
            f"first shard, {first.name}, which is not beside it"
        )
    return first


def read_gguf(path: str | os.PathLike[str]) -> GGUFMetadata:
    """Read the metadata of the GGUF at ``path`` (shard 1 when given another shard).

    Raises ``CheckpointError`` naming the path, the key and the byte offset when the file is not a
    GGUF, is truncated, declares a length past its end or past the ceilings above, or holds a
    value of an unknown type; and when it is an mmproj file (a vision projector, not a model)."""
    if not isinstance(path, str | os.PathLike):
        raise CheckpointError(
            f"GGUF source: expected a path (a str or os.PathLike), found {type(path).__name__}"
        )
    path = first_shard(Path(path))
    kind = path_kind(path)
    if kind != FILE:
        raise CheckpointError(f"{path}: {kind or 'missing'}, not a GGUF file")
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 24:
                raise CheckpointError(
                    f"{path}: {size} bytes, shorter than a GGUF header (24 bytes): not a GGUF file"
                )
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                meta = _Reader(path, data).read()
    except CheckpointError:
        raise  # an OSError too, but already saying where
    except OSError as error:
        raise CheckpointError(f"{path}: cannot be read ({error.strerror or error})") from error
    _refuse_mmproj(meta)
    return meta


def _refuse_mmproj(meta: GGUFMetadata) -> None:
    # llama.cpp's converter writes general.type "mmproj" (architecture "clip") for the vision or
    # audio projector of a multimodal model, loaded beside the model with --mmproj.
    if meta.get("general.type") == "mmproj" or meta.get("general.architecture") == "clip":
        raise CheckpointError(
            f"{meta.path}: an mmproj file (general.type={meta.get('general.type')!r}, "
            f"architecture {meta.get('general.architecture')!r}): the vision/audio projector "
            "llama.cpp loads beside a model with --mmproj; it holds no vocabulary. Pass the "
            "model's GGUF instead"
        )


class _Reader:
    """One pass over the metadata; ``pos`` is the next byte to read."""

    def __init__(self, path: Path, data: mmap.mmap) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.pos = 0
        self.endian = "<"
        self.key = "the header"

    def fail(self, what: str, offset: int | None = None) -> CheckpointError:
        at = self.pos if offset is None else offset
        return CheckpointError(f"{self.path}: {self.key} at byte {at:,}: {what}")

    def need(self, count: int, what: str) -> None:
        if count > self.size - self.pos:
            raise self.fail(
                f"{what} needs {count:,} bytes but the file has {self.size - self.pos:,} left "
                "(truncated, or a corrupt length)"
            )

    def scalar(self, code: str, width: int, what: str) -> Any:
        self.need(width, what)
        (value,) = struct.unpack_from(self.endian + code, self.data, self.pos)
        self.pos += width
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar("I", 4, what))

    def u64(self, what: str) -> int:
        return int(self.scalar("Q", 8, what))

    def string(self, what: str) -> str:
        start = self.pos
        length = self.u64(f"the length of {what}")
        if length > MAX_STRING_BYTES:
            raise self.fail(
                f"{what} declares {length:,} bytes, more than the {MAX_STRING_BYTES:,} read",
                start,
            )
        self.need(length, what)
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{what} is not UTF-8 ({error})", start) from error

    def read(self) -> GGUFMetadata:
        if self.data[:4] != GGUF_MAGIC:
            raise self.fail(f"starts with {self.data[:4]!r}, not the GGUF magic b'GGUF'", 0)
        self.pos = 4
        version = self.u32("the version")
        if version not in (2, 3):
            swapped = struct.unpack_from(">I", self.data, 4)[0]
            if swapped in (2, 3):  # a big-endian GGUF (s390x builds write them)
                self.endian, version = ">", swapped
            else:
                raise self.fail(f"GGUF version {version}; only versions 2 and 3 are read", 4)
        tensor_count = self.u64("the tensor count")
        key_count = self.u64("the key-value count")
        # Each key-value takes at least 13 bytes (an empty key, a type, a one-byte value).
        if key_count > MAX_KEYS or key_count * 13 > self.size - self.pos:
            raise self.fail(f"declares {key_count:,} key-values, more than the file can hold")
        values: dict[str, Any] = {}
        types: dict[str, str] = {}
        offsets: dict[str, int] = {}
        for index in range(key_count):
            offset = self.pos
            self.key = f"key-value {index}"
            key = self.string("its key")
            self.key = repr(key)
            if key in values:
                raise self.fail("a key present twice", offset)
            value_type = self.u32("the value type")
            values[key], types[key] = self.value(value_type)
            offsets[key] = offset
        end = self.pos
        self.key = "the tensor descriptions"
        rows = self.embedding_rows(tensor_count)
        digest = hashlib.sha256(self.data[:end]).hexdigest()
        shard = None
        if "split.count" in values:
            shard = (int(values.get("split.no", 0)) + 1, int(values["split.count"]))
        return GGUFMetadata(
            path=self.path,
            version=version,
            tensor_count=tensor_count,
            values=MappingProxyType(values),
            types=MappingProxyType(types),
            offsets=MappingProxyType(offsets),
            embedding_rows=rows,
            metadata_sha256=digest,
            shard=shard,
        )

    def value(self, value_type: int) -> tuple[Any, str]:
        if value_type == _STRING:
            return self.string("the string value"), "string"
        if value_type in _SCALARS:
            code, width = _SCALARS[value_type]
            return self.scalar(code, width, "the value"), _TYPE_NAMES[value_type]
        if value_type == _ARRAY:
            return self.array()
        raise self.fail(f"unknown value type {value_type}", self.pos - 4)

    def array(self) -> tuple[tuple[Any, ...], str]:
        start = self.pos
        item_type = self.u32("the array's element type")
        count = self.u64("the array's length")
        name = _TYPE_NAMES.get(item_type)
        if name is None or item_type == _ARRAY:
            what = "nested arrays are not GGUF" if name else f"unknown element type {item_type}"
            raise self.fail(what, start)
        smallest = 8 if item_type == _STRING else _SCALARS[item_type][1]
        if count > MAX_ARRAY_ITEMS or count * smallest > self.size - self.pos:
            raise self.fail(
                f"an array of {count:,} {name} values, more than the file can hold", start + 4
            )
        if item_type == _STRING:
            return self.strings(count), "array[string]"
        code, width = _SCALARS[item_type]
        items = struct.unpack_from(f"{self.endian}{count}{code}", self.data, self.pos)
        self.pos += count * width
        return items, f"array[{name}]"

    def strings(self, count: int) -> tuple[str, ...]:
        # The hot loop (two arrays of ~250k strings): locals only, no method calls per item.
        data, pos, size, unpack = self.data, self.pos, self.size, struct.Struct(self.endian + "Q")
        items: list[str] = []
        append = items.append
        for index in range(count):
            if pos + 8 > size:
                self.pos = pos
                raise self.fail(f"element {index}: truncated before its length")
            (length,) = unpack.unpack_from(data, pos)
            if length > size - pos - 8 or length > MAX_STRING_BYTES:
                raise self.fail(
                    f"element {index} declares {length:,} bytes, past the end of the file", pos
                )
            try:
                append(data[pos + 8 : pos + 8 + length].decode("utf-8"))
            except UnicodeDecodeError as error:
                raise self.fail(f"element {index} is not UTF-8 ({error})", pos) from error
            pos += 8 + length
        self.pos = pos
        return tuple(items)

    def embedding_rows(self, tensor_count: int) -> int | None:
        """The vocabulary dimension of ``token_embd.weight`` (ne[1]), scanning the tensor
        descriptions that follow the key-values; None if absent or the scan would not end."""
        if tensor_count > MAX_TENSORS_SCANNED:
            return None
        for _ in range(tensor_count):
            name = self.string("a tensor name")
            dims = self.u32("the tensor's dimension count")
            if dims > 8:  # GGML_MAX_DIMS is 4
                raise self.fail(f"tensor {name!r} declares {dims} dimensions")
            self.need(dims * 8 + 12, f"tensor {name!r}")
            shape = struct.unpack_from(f"{self.endian}{dims}Q", self.data, self.pos)
            self.pos += dims * 8 + 12  # the dimensions, the type (u32), the offset (u64)
            if name == "token_embd.weight" and len(shape) >= 2:
                return int(shape[1])
        return None
