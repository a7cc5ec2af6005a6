"""Let one OS user traverse a folder through a POSIX access ACL, leaving everyone else's access as it was.

The embedded server's user must reach its data dir for the server's whole life: the checkpointer
writes ``global/pg_control`` by its absolute path. A named-user entry with ``x`` gives it exactly that,
where ``chmod o+x`` would open the folder's known paths to every user of the machine.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

_XATTR = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_X = 1
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")

Entries = dict[tuple[int, int], int]  # (tag, id) -> permission bits (r=4, w=2, x=1)


class Unsupported(OSError):
    """The folder's filesystem keeps no POSIX ACLs."""


def read_acl(folder: Path) -> Entries:
    """The folder's access ACL; its mode bits as the three base entries when it has none (or cannot)."""
    try:
        raw = os.getxattr(folder, _XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        mode = folder.stat().st_mode
        return {(_USER_OBJ, _NO_ID): mode >> 6 & 7, (_GROUP_OBJ, _NO_ID): mode >> 3 & 7, (_OTHER, _NO_ID): mode & 7}
    (version,) = _HEADER.unpack_from(raw)
    if version != _VERSION:
        raise Unsupported(errno.ENOTSUP, f"{folder} has an ACL of unknown version {version}")
    return {(tag, ident): perm for tag, perm, ident in _ENTRY.iter_unpack(raw[_HEADER.size:])}


def allows_traverse(entries: Entries, uid: int) -> bool:
    """True when the ACL names ``uid`` with ``x`` and its mask lets that through."""
    named = entries.get((_USER, uid), 0)
    return bool(named & _X and entries.get((_MASK, _NO_ID), _X) & _X)


def grant_traverse(folder: Path, uid: int) -> bool:
    """Add ``x`` for ``uid`` to the folder's ACL (and its mask); every other entry keeps its bits. False
    when the ACL allowed it already."""
    entries = read_acl(folder)
    if allows_traverse(entries, uid):
        return False
    entries[(_USER, uid)] = entries.get((_USER, uid), 0) | _X
    # The mask bounds named entries and the owning group. When the ACL is new it starts from the group's
    # bits, so the group keeps exactly what it had. An existing mask gains x, which also lets through any
    # named entry whose x it was masking (rare on the folders above a data dir).
    mask = entries.get((_MASK, _NO_ID), entries[(_GROUP_OBJ, _NO_ID)])
    entries[(_MASK, _NO_ID)] = mask | _X
    raw = _HEADER.pack(_VERSION) + b"".join(
        _ENTRY.pack(tag, perm, ident) for (tag, ident), perm in sorted(entries.items()))
    try:
        os.setxattr(folder, _XATTR, raw, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise Unsupported(exc.errno, f"{folder}'s filesystem keeps no ACLs") from exc
        raise
    return True
