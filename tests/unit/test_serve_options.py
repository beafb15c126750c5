"""`mtkit serve`'s refusals before any model is loaded, in process: the missing extra and
options out of range, each one line on stderr and exit 2."""

from __future__ import annotations

import socket
import sys

import pytest

from mtkit.errors import ConfigError
from mtkit.serve.processes import bind_group
from mtkit.serve.server import web_server


@pytest.fixture
def without_fastapi(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the extra were not installed: importing fastapi fails."""
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` -> ImportError


def test_the_missing_extra_is_named_with_its_install_command(without_fastapi):
    with pytest.raises(ConfigError, match=r"pip install 'mtkit\[serve\]'"):
        web_server()


def test_the_command_without_the_extra_is_one_line_and_exit_2(
        without_fastapi, mtkit_inprocess, expect_error, tmp_path):
    result = mtkit_inprocess(["serve", "-m", "model.pt"], tmp_path)
    expect_error(result, "mtkit serve needs FastAPI and uvicorn",
                 "pip install 'mtkit[serve]'")


@pytest.mark.parametrize("args, needle", [
    (["--port", "70000"], "--port 70000: out of range; expected between 0 and 65535"),
    (["--batch-window-ms", "-1"], "--batch-window-ms -1.0: out of range"),
    (["--max-lines", "0"], "--max-lines 0: out of range; expected at least 1"),
    (["--max-chars", "0"], "--max-chars 0"),
    (["--max-body-bytes", "0"], "--max-body-bytes 0"),
    (["--max-beam", "0"], "--max-beam 0"),
    (["--max-tokens", "0"], "'--max-tokens': Input should be greater than or equal to 1"),
    (["--max-lines", "100", "--max-queue", "10"],
     "--max-lines 100 exceeds --max-queue 10: such a request could never be queued"),
    (["--api-key", " "], "--api-key (or MTKIT_API_KEY): empty"),
    (["--workers", "0"], "--workers 0: out of range; expected between 1 and 64"),
    (["--cors-origin", "app.example.org"], "--cors-origin app.example.org: expected * or an "
                                           "origin such as https://app.example.org"),
    (["--cors-origin", "https://a.org/page"], "--cors-origin https://a.org/page"),
])
def test_options_out_of_range(args, needle, mtkit_inprocess, expect_error, tmp_path):
    result = mtkit_inprocess(["serve", "-m", "model.pt", *args], tmp_path)
    expect_error(result, needle)


def test_an_empty_key_in_the_environment_is_refused(mtkit_inprocess, expect_error, tmp_path,
                                                    monkeypatch):
    """MTKIT_API_KEY= (a secret that did not reach the environment, say) is refused as an
    empty --api-key is, not a server that takes requests without a key."""
    monkeypatch.setenv("MTKIT_API_KEY", "")
    result = mtkit_inprocess(["serve", "-m", "model.pt"], tmp_path)
    expect_error(result, "--api-key (or MTKIT_API_KEY): empty")


def _port_left_in_time_wait() -> int:
    """A loopback port whose listener has closed, with a connection of it that the server
    side closed first: in TIME_WAIT, as after a server stopped with clients connected."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
        client.recv(1)
        client.close()
    return port


def test_processes_bind_a_port_a_stopped_server_has_just_left():
    """serve --processes N right after a server on that port stopped (its connections in
    TIME_WAIT, for a minute) binds, as one process does (create_server's SO_REUSEADDR);
    a port another socket listens on is still refused."""
    port = _port_left_in_time_wait()
    for sock in bind_group("127.0.0.1", port, 2):
        sock.close()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        with pytest.raises(ConfigError, match="Address already in use"):
            bind_group("127.0.0.1", taken.getsockname()[1], 2)
