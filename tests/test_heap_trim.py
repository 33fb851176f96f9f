"""The server gives freed memory back to the system after enough churn (glibc's malloc_trim)."""

import platform
import subprocess
import sys

import pytest

from mcp_resili.server.budget import MemoryAccount
from mcp_resili.server.episode import Episode
from mcp_resili.server.heap import HeapTrimmer, glibc_trim

MIB = 1024 * 1024


class CountingTrim:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return 1


def test_a_trim_comes_once_per_threshold_of_churn_and_not_before():
    trim = CountingTrim()
    trimmer = HeapTrimmer(every=10 * MIB, trim=trim)
    for _ in range(3):
        trimmer.churned(3 * MIB)
    assert trim.calls == 0  # 9 MiB so far
    trimmer.churned(1 * MIB)
    assert trim.calls == 1  # 10 MiB: one trim, and the count starts again
    trimmer.churned(9 * MIB)
    trimmer.churned(0)
    trimmer.churned(-5 * MIB)  # nothing negative is churn
    assert trim.calls == 1
    trimmer.churned(1 * MIB)
    assert (trim.calls, trimmer.trims) == (2, 2)


def test_without_a_c_library_trim_the_trimmer_does_nothing():
    trimmer = HeapTrimmer(every=1, trim=None)
    trimmer.churned(100 * MIB)
    assert trimmer.trims == 0


def test_the_account_counts_arguments_taken_in_and_episodes_released_as_churn():
    trim = CountingTrim()
    account = MemoryAccount(trimmer=HeapTrimmer(every=4 * MIB, trim=trim))
    episode = Episode(id="e-1", task=None, fault_key="e-1/0", seed=0)
    assert account.admit(episode, 3 * MIB) is None
    assert trim.calls == 0
    episode.usage.state_bytes = 2 * MIB  # the call's state stays with the episode
    account.grew(episode)
    assert account.admit(episode, 512 * 1024) is None
    assert trim.calls == 0  # 3.5 MiB in
    account.forget(episode)  # the episode closes: the bytes it held are released
    assert trim.calls == 1
    assert account.total == 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibcs_trim_gives_a_fragmented_heaps_free_pages_back():
    # In a fresh process: 64 MiB in 96 KiB blocks (under glibc's 128 KiB mmap threshold, so in the
    # heap), each followed by a small block kept alive, so freeing the large ones leaves holes that
    # glibc does not return by itself. The trim must give most of them back.
    script = """
from mcp_resili.server.heap import glibc_trim

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) // 1024

big, pins = [], []
for i in range(680):
    big.append(bytearray(96 * 1024))
    pins.append(bytearray(1024))
del big
before = rss()
glibc_trim()()
print(before, rss())
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before - after >= 32, (before, after)  # MiB given back of the ~64 freed


def test_glibcs_trim_is_found_here_when_the_c_library_is_glibc():
    found = glibc_trim()
    if platform.libc_ver()[0] == "glibc":
        assert found is not None and found() in (0, 1)
    else:
        assert found is None
