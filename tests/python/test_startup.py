"""Start-up checks that need no model load: the port is checked first."""

import socket
import subprocess
import time

from conftest import BIN


def test_port_in_use_is_reported_before_the_model_loads(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # A model path that does not exist: if the model were loaded first,
        # the error would be about the model, not the port.
        missing = tmp_path / "no-such-model.gguf"
        t0 = time.monotonic()
        done = subprocess.run(
            [str(BIN), "--model", str(missing), "--port", str(port)],
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode != 0
        err = done.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in err, err
        assert "no-such-model" not in err, err
        assert time.monotonic() - t0 < 30


def test_logs_are_plain_when_not_a_terminal(tmp_path):
    # stderr is a pipe here: no ANSI colour codes in the log lines.
    missing = tmp_path / "no-such-model.gguf"
    done = subprocess.run(
        [str(BIN), "--model", str(missing), "--port", "0"],
        capture_output=True, text=True, timeout=60, env={"RUST_LOG": "info"},
    )
    assert done.returncode != 0
    # The model-load progress line was logged (so there was a log to colour).
    assert "loading model" in done.stderr, done.stderr
    assert "no-such-model" in done.stderr
    assert "\x1b[" not in done.stderr, repr(done.stderr[:500])
