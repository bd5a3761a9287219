"""The ledger's zstd dictionary: what every receipt repeats, given to the compressor once instead of in each value.

A config snapshot is ~700 bytes of JSON whose keys, and most of whose values, every other snapshot holds too;
compressed alone it still takes ~410 bytes, most of them that skeleton. zstd reads a dictionary of such text
first and refers back into it (zstd's answer for small data: https://facebook.github.io/zstd/#small-data), so
the same snapshot takes ~50, and an attempt's event pack a third less. The dictionary (DICTIONARY_FILE) is what
jobtrail itself writes for a default job of each template: its spec, its config, its script's config section
and one event line of each kind (tools/ledger_dictionary.py wrote it).

It is part of the format: a value packed with it reads back only with these exact bytes. So the file is frozen,
its sha256 checked before first use; a better dictionary would be a new codec beside this one (codec.py).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path
from typing import Any

DICTIONARY_FILE = Path(__file__).with_name("zstd_dictionary_v1.txt")
DICTIONARY_SHA256 = "1d090d7833fe0fd648e8d15452bf3c577afa3fee92bae649ca4b30edc5577518"
LEVEL = 19  # packs are written once and read many times: the smallest output is worth the slower write

_per_thread = threading.local()  # zstandard's (de)compressors may not be shared between threads


class DictionaryMismatchError(RuntimeError):
    """The dictionary file is not the one values were packed with: nothing can be read or written safely."""


@functools.cache
def _dictionary() -> Any:
    import zstandard  # imported on first use: the server starts without it

    content = DICTIONARY_FILE.read_bytes()
    if hashlib.sha256(content).hexdigest() != DICTIONARY_SHA256:
        raise DictionaryMismatchError(f"{DICTIONARY_FILE} has changed; reinstall jobtrail")
    return zstandard.ZstdCompressionDict(content, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def _codecs() -> tuple[Any, Any]:
    codecs: tuple[Any, Any] | None = getattr(_per_thread, "codecs", None)
    if codecs is None:
        import zstandard

        shared = _dictionary()
        # The codec byte names the dictionary, and blobs and scripts are checked against their sha256:
        # zstd's own dictionary id and checksum would repeat both in every value.
        compressor = zstandard.ZstdCompressor(level=LEVEL, dict_data=shared, write_checksum=False, write_dict_id=False)
        codecs = compressor, zstandard.ZstdDecompressor(dict_data=shared)
        _per_thread.codecs = codecs
    return codecs


def compress(data: bytes) -> bytes:
    compressed: bytes = _codecs()[0].compress(data)
    return compressed


def decompress(data: bytes) -> bytes:
    decompressed: bytes = _codecs()[1].decompress(data)
    return decompressed
