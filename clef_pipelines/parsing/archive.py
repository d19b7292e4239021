"""Archives (a DOCX is a zip) bounded by what they unpack to, before any parser reads them.

`parsing.max_file_bytes` bounds the bytes on disk only: a 546 KB zip can hold a 176 MB XML
part. `check_zip` refuses, with reason `too_large`, an archive whose directory declares more
than `max_unpacked_bytes` in all or more than `max_entries` entries, then decompresses every
entry a slice at a time (bounded memory) counting the bytes that really come out, since a
directory can lie; the parser then reads the same entries, which the zip module cuts at the
declared sizes.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from clef_pipelines.config import ParsingConfig
from clef_pipelines.parsing.models import ParseError

#: Defaults of `parsing.max_unpacked_bytes` and `parsing.max_archive_entries`.
DEFAULT_MAX_UNPACKED_BYTES: int = ParsingConfig.model_fields["max_unpacked_bytes"].default
DEFAULT_MAX_ARCHIVE_ENTRIES: int = ParsingConfig.model_fields["max_archive_entries"].default
_SLICE = 1 << 20


def check_zip(data: bytes, name: str, *, max_unpacked_bytes: int, max_entries: int) -> None:
    """ParseError `too_large` naming the limit when the zip in `data` unpacks past it;
    `malformed` when it is no readable zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > max_entries:
                raise ParseError(
                    "too_large",
                    f"{name}: {len(infos)} archive entries, over parsing.max_archive_entries "
                    f"({max_entries})",
                )
            declared = sum(i.file_size for i in infos)
            if declared > max_unpacked_bytes:
                raise ParseError(
                    "too_large",
                    f"{name}: its directory declares {declared} bytes unpacked, over "
                    f"parsing.max_unpacked_bytes ({max_unpacked_bytes})",
                )
            total = 0
            for info in infos:
                with archive.open(info) as member:
                    while chunk := member.read(_SLICE):
                        total += len(chunk)
                        if total > max_unpacked_bytes:
                            raise ParseError(
                                "too_large",
                                f"{name}: unpacks to over {max_unpacked_bytes} bytes, over "
                                f"parsing.max_unpacked_bytes ({max_unpacked_bytes})",
                            )
    except ParseError:
        raise
    except (zipfile.BadZipFile, NotImplementedError, EOFError, zlib.error) as exc:
        raise ParseError("malformed", f"{name}: not a readable archive ({exc})") from exc
    except (OSError, ValueError, RuntimeError) as exc:  # a bad header, an encrypted entry
        raise ParseError("malformed", f"{name}: not a readable archive ({exc})") from exc
