"""Typed keyspaces: one declaration per kind of stored record, bytes only inside.

An operator declares each of its keyspaces once (which column family, which tag, which
layout) and then builds, parses and scans keys only through it: no byte offsets or
slicing outside this package and :mod:`stores.keys`. Keys that do not parse raise
:class:`~stores.errors.StateCorruptError`.

* :mod:`.base`: encoded keys, i64 columns, time-first and key-time layouts;
* :mod:`.grouped`: key-first records of grouping keys and time-bucket indexes (sessions);
* :mod:`.slots`: a key's records in numbered slots (count windows);
* :mod:`.messages`: the Samza seed's Message Store key matrix (joins).
"""

from stores.keyspace.base import *  # noqa: F403
from stores.keyspace.base import __all__ as _base
from stores.keyspace.grouped import *  # noqa: F403
from stores.keyspace.grouped import __all__ as _grouped
from stores.keyspace.messages import *  # noqa: F403
from stores.keyspace.messages import __all__ as _messages
from stores.keyspace.slots import *  # noqa: F403
from stores.keyspace.slots import __all__ as _slots

__all__ = [*_base, *_grouped, *_slots, *_messages]
