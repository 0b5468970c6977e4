"""Giving the C heap's free memory back: it runs on glibc, and frees what a burst left."""

from __future__ import annotations

import platform
from concurrent.futures import ThreadPoolExecutor

import pytest

from stores.heap import release_free_heap

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_a_burst_of_freed_memory_leaves_the_process() -> None:
    def rss_kib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    # many small blocks (below the mmap threshold: they come from the heap's arenas)
    burst = [bytearray(512) for _ in range(200_000)]
    keep = [bytearray(512)]  # allocated last: the heap's top may stay in use
    high = rss_kib()
    del burst
    assert release_free_heap() is True
    assert rss_kib() < high - 50_000  # ~100 MB were freed; most of it goes back
    assert len(keep[0]) == 512


def test_it_can_be_called_from_several_threads_and_again() -> None:
    with ThreadPoolExecutor(4) as pool:
        ran = set(pool.map(lambda _: release_free_heap(), range(8)))
    assert ran == {GLIBC}
