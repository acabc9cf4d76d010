"""``promptcache serve --exit-with-parent``: a server whose parent is killed (a test run
stopped with SIGKILL, an xdist worker that crashed) shuts itself down instead of lingering
with ~1 GB of weights. The pytest plugin's :class:`promptcache.integrations.pytest_plugin.LocalEngineServer`
passes the flag."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from promptcache.integrations.pytest_plugin import LocalEngineServer


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie not yet reaped by init still answers kill(0); /proc says it is dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.2)
    return False


def _parent_running(child_code: str) -> tuple[subprocess.Popen, int]:
    """A parent process that starts ``child_code`` in a grandchild, prints its pid and
    sleeps; returns the parent and the grandchild's pid."""
    parent_code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", {child_code!r}])
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_watch_parent_fires_when_the_parent_is_killed(tmp_path):
    marker = tmp_path / "fired"
    child = textwrap.dedent(
        f"""
        import os, time
        from local_engine.server.cli import watch_parent
        watch_parent(os.getppid(), lambda: open({str(marker)!r}, "w").write("x"), 0.1)
        time.sleep(0.5)
        assert not os.path.exists({str(marker)!r}), "fired while the parent was alive"
        open({str(marker)!r} + ".alive", "w").write("x")
        time.sleep(30)
        """
    )
    parent, child_pid = _parent_running(child)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "fired.alive").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "fired.alive").exists(), "the watcher fired with the parent alive"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the parent died but on_exit was not called"
    finally:
        parent.kill()
        if not _gone(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_plugin_server_passes_the_flag():
    assert "--exit-with-parent" in LocalEngineServer().command()


@pytest.mark.slow
def test_real_server_exits_when_its_parent_is_killed(tmp_path):
    env_dir = str(tmp_path / "weights")
    child = textwrap.dedent(
        f"""
        import os, sys, time
        os.environ["PROMPTCACHE_WEIGHT_CACHE_DIR"] = {env_dir!r}
        from promptcache.integrations.pytest_plugin import LocalEngineServer
        srv = LocalEngineServer(extra_args=["--threads", "1"]).start()
        open({str(tmp_path / "pid")!r}, "w").write(str(srv.proc.pid))
        time.sleep(600)
        """
    )
    # parent -> child (holds LocalEngineServer) -> server; kill the child with SIGKILL
    parent, holder_pid = _parent_running(child)
    pid_file = tmp_path / "pid"
    try:
        deadline = time.monotonic() + 180
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert pid_file.exists(), "the server did not start"
        server_pid = int(pid_file.read_text())
        os.kill(holder_pid, signal.SIGKILL)
        assert _wait_gone(server_pid, 60), "the server outlived the process that started it"
    finally:
        parent.kill()
        for pid in (holder_pid,):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
