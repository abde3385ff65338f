"""``cachelock.hold``: one holder per cache entry. A second one that waits says for whom and for how long, then goes
on once the entry is free; past its limit, or when it may not wait, it ends with exit 4 naming the holder; the lock
folder is gone once the entry is let go, and so is a cache folder made for nothing.

Flock locks belong to an open file, so a second ``hold`` in the same process contends like another run would."""

from __future__ import annotations

import os
import threading
import time

import pytest

from patchset.plumbing import cachelock
from patchset.plumbing.errors import EXIT_LOCKED, BadInput, TreeLocked
from patchset.plumbing.ui import Console

HOLDER = "python -m patchset apply --no-test"


def test_a_second_holder_waits_saying_for_whom_and_how_long_then_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cachelock.WAIT_ENV, "30")
    order = []
    with cachelock.hold(tmp_path, "upstreams-verl-0.8.0", "verl 0.8.0", Console(), wait=True, command=HOLDER):
        threading.Timer(0.5, lambda: order.append("first lets go")).start()

        def second() -> None:
            with cachelock.hold(tmp_path, "upstreams-verl-0.8.0", "verl 0.8.0", Console(), wait=True):
                order.append("second holds")

        waiting = threading.Thread(target=second)
        waiting.start()
        while "first lets go" not in order:
            time.sleep(0.05)
    waiting.join(timeout=10)

    assert order == ["first lets go", "second holds"]
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: verl 0.8.0 is being made by another run (pid {os.getpid()}, started "), line
    assert line.endswith(f": {HOLDER}); waiting for it to finish (up to 30 s, $PATCHSET_CACHE_WAIT), then using it")
    assert list(tmp_path.iterdir()) == []  # no lock folder stays


def test_a_holder_that_may_not_wait_is_refused_with_exit_4_naming_the_holder(tmp_path):
    with cachelock.hold(tmp_path, "patched-verl-0.8.0", "the patched tree", Console(), wait=False, command=HOLDER):
        with pytest.raises(TreeLocked) as refused:
            with cachelock.hold(tmp_path, "patched-verl-0.8.0", "the patched tree", Console(), wait=False):
                pass

    assert refused.value.exit_code == EXIT_LOCKED == 4
    message = str(refused.value)
    assert message.startswith(f"the patched tree is in use by another run (pid {os.getpid()}, started ")
    assert f"{HOLDER}), which holds " in message and "nothing was changed" in message


def test_waiting_past_the_limit_ends_with_exit_4_and_a_bad_limit_is_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cachelock.WAIT_ENV, "0.3")
    with cachelock.hold(tmp_path, "entry", "the entry", Console(), wait=True, command=HOLDER):
        with pytest.raises(TreeLocked, match=r"still held by another run .* after 0 s of waiting"):
            with cachelock.hold(tmp_path, "entry", "the entry", Console(), wait=True):
                pass
        monkeypatch.setenv(cachelock.WAIT_ENV, "soon")
        with pytest.raises(BadInput, match=r"\$PATCHSET_CACHE_WAIT is 'soon', not a number of seconds"):
            with cachelock.hold(tmp_path, "entry", "the entry", Console(), wait=True):
                pass


def test_a_cache_made_for_a_lock_alone_is_removed_again(tmp_path):
    cache = tmp_path / "cache"
    with cachelock.hold(cache, "entry", "the entry", Console(), wait=False):
        assert (cache / cachelock.LOCKS / "entry" / "lock").is_file()

    assert not cache.exists()
