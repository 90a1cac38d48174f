"""A fast writer of TensorBoard event files holding scalars (and the odd image).

TensorBoard's own writer builds a protobuf per value and checksums it in pure Python
(about 80 microseconds per scalar on the reference machine, more than a CartPole step).
Scalars need only three small messages, so this module encodes them directly:

    Event    { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary  { repeated Value value = 1; }
    Value    { string tag = 1; float simple_value = 2; }

and frames each event as a TFRecord (length, masked CRC32C of the length, payload, masked
CRC32C of the payload) using the C implementation of the ``crc32c`` package. Files are
read by TensorBoard and by ``tensorboard.backend.event_processing`` like any other.
Images (:func:`image_event`: a PNG, or an animated GIF, TensorBoard's way to show a video)
are rare and large, and encoded the same way with ``Value { Image image = 4; }``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
import time
from pathlib import Path

import crc32c

_FILE_COUNTER = itertools.count()
_PACK_DOUBLE = struct.Struct("<d").pack
_PACK_FLOAT = struct.Struct("<f").pack
_PACK_U64 = struct.Struct("<Q").pack
_PACK_U32 = struct.Struct("<I").pack
_CRC_MASK_DELTA = 0xA282EAD8


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64  # protobuf encodes negative int64 as ten-byte two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _masked_crc(data: bytes) -> bytes:
    crc = crc32c.crc32c(data)
    return _PACK_U32((((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF)


def _record(payload: bytes) -> bytes:
    header = _PACK_U64(len(payload))
    return header + _masked_crc(header) + payload + _masked_crc(payload)


def _value_head(tag: str) -> bytes:
    """``Value`` field key, length and tag, to be followed by the packed float."""
    name = tag.encode("utf-8")
    value = b"\x0a" + _varint(len(name)) + name + b"\x15"
    return b"\x0a" + _varint(len(value) + 4) + value


def version_record(wall_time: float) -> bytes:
    """The framed event every event file starts with: ``Event { wall_time, file_version = "brain.Event:2" }``."""
    version = b"brain.Event:2"
    return _record(b"\x09" + _PACK_DOUBLE(wall_time) + b"\x1a" + _varint(len(version)) + version)


def image_event(tag: str, image: bytes, height: int, width: int, channels: int, step: int, wall_time: float) -> bytes:
    """One framed event holding the encoded ``image`` (PNG, GIF...) under ``tag``, at ``step``.

    ``Summary.Image { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }``
    in ``Value { string tag = 1; Image image = 4; }``, which TensorBoard shows in its Images tab
    (an animated GIF plays there, as ``torch.utils.tensorboard``'s ``add_video`` writes it).
    """
    picture = b"".join(
        (
            b"\x08",
            _varint(height),
            b"\x10",
            _varint(width),
            b"\x18",
            _varint(channels),
            b"\x22",
            _varint(len(image)),
            image,
        )
    )
    name = tag.encode("utf-8")
    value = b"".join((b"\x0a", _varint(len(name)), name, b"\x22", _varint(len(picture)), picture))
    summary = b"\x0a" + _varint(len(value)) + value
    return _record(
        b"".join((b"\x09", _PACK_DOUBLE(wall_time), b"\x10", _varint(step), b"\x2a", _varint(len(summary)), summary))
    )


class ScalarEncoder:
    """Encodes events of scalars as framed TFRecords, caching the bytes that never change.

    For a given tag name and set of keys, everything but the wall time, the step and the
    float values is constant; it is built once and reused.
    """

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, ...], tuple[bytes, ...]] = {}
        self._header_crcs: dict[int, bytes] = {}

    def encode(self, names: tuple[str, ...], values, step: int, wall_time: float) -> bytes:
        """One event at ``step`` holding ``values[k]`` under ``names[k]``."""
        layout = self._layouts.get(names)
        if layout is None:
            heads = [_value_head(name) for name in names]
            size = sum(len(h) + 4 for h in heads)
            heads[0] = b"\x2a" + _varint(size) + heads[0]
            layout = self._layouts[names] = tuple(heads)
        if len(layout) == 1:
            (value,) = values
            payload = b"".join(
                (b"\x09", _PACK_DOUBLE(wall_time), b"\x10", _varint(step), layout[0], _PACK_FLOAT(value))
            )
        else:
            parts = [b"\x09", _PACK_DOUBLE(wall_time), b"\x10", _varint(step)]
            for head, value in zip(layout, values):
                parts.append(head)
                parts.append(_PACK_FLOAT(value))
            payload = b"".join(parts)
        size = len(payload)
        header_crc = self._header_crcs.get(size)
        if header_crc is None:
            header_crc = self._header_crcs[size] = _PACK_U64(size) + _masked_crc(_PACK_U64(size))
        crc = crc32c.crc32c(payload)
        return header_crc + payload + _PACK_U32((((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF)


class EventFileWriter:
    """Appends scalar events to one new event file in ``log_dir``, buffered in memory.

    The buffer is written to the file when it exceeds ``buffer_bytes``, on :meth:`flush`
    and on :meth:`close`. Each process gets its own file (host, pid and a counter are in
    the name), so several workers can log into the same directory.
    """

    def __init__(self, log_dir: str | os.PathLike, buffer_bytes: int = 1 << 16) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads a folder's event files in name order, and takes a step that goes back for a restart
        # (it drops the points after it): the counter is padded so that "10" comes after "9" within one second.
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_COUNTER):06d}"
        self.path = self.log_dir / name
        self._file = open(self.path, "xb")
        self._buffer = bytearray()
        self._buffer_bytes = buffer_bytes
        try:
            self._file.write(version_record(time.time()))
            self._file.flush()
        except OSError as exc:  # a full disk: no file left open, nor an empty one behind
            with contextlib.suppress(OSError):
                self._file.close()
            self.path.unlink(missing_ok=True)
            raise type(exc)(exc.errno, f"could not write {self.path}: {exc.strerror or exc}.") from exc

    def write(self, record: bytes) -> None:
        """Buffer framed records (from :meth:`ScalarEncoder.encode` or ``ScalarBatch.encode``)."""
        self._buffer += record
        if len(self._buffer) >= self._buffer_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the buffer to the file and flush it to the operating system.

        Raises:
            OSError: naming the event file (a full disk); the buffered events are dropped.
        """
        try:
            if self._buffer:
                self._file.write(self._buffer)
            self._file.flush()
        except OSError as exc:
            raise type(exc)(exc.errno, f"could not write {self.path}: {exc.strerror or exc}.") from exc
        finally:
            self._buffer.clear()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            try:
                self.flush()
            finally:
                try:
                    self._file.close()
                except OSError:
                    pass  # flush already raised, naming the file
