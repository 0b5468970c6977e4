"""Message Store key layouts: the seed's key matrix and the choice among them."""

from __future__ import annotations

from stores.keyspace import MessageLayout
from window_operator.config import JoinConfig

__all__ = ["LARGE_WINDOW_MS", "StoreLayout", "choose_layout"]

#: ``auto`` stores a time join with equal fields key-first when ``hi - lo`` exceeds
#: this. A time-first deep lookup seeks once per merged time range and reads every key's
#: messages in it; a key-first one seeks once per join key and reads only that key's.
#: A seek costs about as much as reading a few dozen entries, so time-first wins while a
#: window holds few messages per key -- short windows; at a minute and more the window of
#: a busy stream holds enough that per-key seeks are cheaper.
LARGE_WINDOW_MS = 60_000

StoreLayout = MessageLayout
"""Message Store key layouts (``join.store``): the store's :class:`MessageLayout`."""


def choose_layout(join: JoinConfig) -> StoreLayout:
    """The Message Store layout of a join (``join.store``, or the seed's matrix for auto).

    Rows joins use ``<equal_flds><offset>``. Time joins without equal fields use
    ``<timestamp><offset>``; with equal fields, windows wider than
    :data:`LARGE_WINDOW_MS` use ``<equal_flds><timestamp><offset>`` and narrower ones
    ``<timestamp><equal_flds><offset>``. Raises :class:`ValueError` for a time layout
    asked of a rows join.
    """
    if join.rows is not None:
        if join.store not in ("auto",):
            raise ValueError(
                f"rows joins store messages as <equal_flds><offset>; use store: auto "
                f"(got {join.store})"
            )
        return StoreLayout.FIELDS_OFFSET
    if join.store != "auto":
        return StoreLayout(join.store)
    if not join.on:
        return StoreLayout.TS_OFFSET
    bounds = join.bounds
    assert bounds is not None
    if bounds[1] - bounds[0] > LARGE_WINDOW_MS:
        return StoreLayout.FIELDS_TS_OFFSET
    return StoreLayout.TS_FIELDS_OFFSET
