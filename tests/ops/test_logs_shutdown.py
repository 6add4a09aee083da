"""JSON logs and SIGTERM shutdown (in a real child process)."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from reconciler.ops.logs import configure_logging
from reconciler.ops.shutdown import Shutdown


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logs_are_one_object_per_line_with_extras(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(json_logs=True, level="debug", stream=stream)
    log = logging.getLogger("reconciler.test")
    log.info("applied %s", "abc123", extra={"cluster": "prod-a", "step": 2})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("apply failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "applied abc123"
    assert first["level"] == "info"
    assert first["logger"] == "reconciler.test"
    assert (first["cluster"], first["step"]) == ("prod-a", 2)
    assert first["time"].endswith("+00:00")
    assert second["level"] == "error"
    assert "ValueError: boom" in second["exception"]


def test_text_logs_and_level_errors(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(level="WARNING", stream=stream)
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    assert "hidden" not in stream.getvalue()
    assert "WARNING x: shown" in stream.getvalue()
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure_logging(level="loud")


def test_steps_run_newest_first_and_failures_do_not_stop_the_rest() -> None:
    order: list[str] = []
    sd = Shutdown()
    sd.on_shutdown("servers", lambda: order.append("servers"))

    def broken() -> None:
        raise RuntimeError("push failed")

    sd.on_shutdown("status-queue", broken)
    sd.on_shutdown("leader", lambda: order.append("leader"))
    assert not sd.requested
    sd.request("test")
    assert sd.wait(0)
    assert sd.run_steps() == ["status-queue"]
    assert order == ["leader", "servers"]


def test_the_signal_handler_only_notes_the_signal_and_wait_acts_on_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the handler runs between two bytecodes of the main thread, which may hold the lock of a
    # log stream or of the Event: it logs nothing and sets nothing but one attribute
    sd = Shutdown()
    with caplog.at_level(logging.INFO, logger="reconciler.ops.shutdown"):
        sd._handle(signal.SIGTERM, None)
        assert caplog.messages == []
        assert sd.requested and not sd.event.is_set()
        assert sd.wait(5)
    assert sd.event.is_set()
    assert caplog.messages == ["shutdown on SIGTERM"]


def test_wait_with_a_timeout_and_no_signal_returns_false() -> None:
    sd = Shutdown()
    assert not sd.wait(0.3)
    assert not sd.wait(0)
    assert not sd.requested


CHILD = textwrap.dedent(
    """
    import sys, time
    from reconciler.ops.shutdown import Shutdown
    sd = Shutdown()
    sd.install()
    sd.on_shutdown("first", lambda: print("stopped first", flush=True))
    sd.on_shutdown("last", lambda: print("stopped last", flush=True))
    print("ready", flush=True)
    while not sd.wait(0.05):
        pass
    sd.run_steps()
    sys.exit(0)
    """
)


def test_sigterm_runs_shutdown_steps_and_exits_zero() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["stopped last", "stopped first"]
    assert "Traceback" not in err


def test_second_signal_exits_at_once() -> None:
    # the steps take long: the child says so once the first signal got it there
    child = CHILD.replace("sd.run_steps()", "print('stopping', flush=True); time.sleep(30)")
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "stopping"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
