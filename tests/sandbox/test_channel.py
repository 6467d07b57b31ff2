"""The private channel's framing is strict: one frame, this run's nonce, nothing more or less."""

from __future__ import annotations

import pytest
from agentforge.sandbox.channel import FrameError, decode_frame, encode_frame, new_nonce


def test_round_trip() -> None:
    nonce = new_nonce()
    assert decode_frame(encode_frame(b'{"a": 1}', nonce), nonce) == b'{"a": 1}'


@pytest.mark.parametrize("mangle", [
    lambda f: f[:10],  # short header
    lambda f: f[:-1],  # short payload
    lambda f: f + b"x",  # trailing bytes
    lambda f: b"BADMAGIC" + f[8:],
    lambda f: f + f,  # two frames
    lambda f: b"",
])
def test_malformed_frames_are_rejected(mangle) -> None:  # type: ignore[no-untyped-def]
    nonce = new_nonce()
    with pytest.raises(FrameError):
        decode_frame(mangle(encode_frame(b"{}", nonce)), nonce)


def test_another_runs_nonce_is_rejected() -> None:
    with pytest.raises(FrameError, match="nonce"):
        decode_frame(encode_frame(b"{}", new_nonce()), new_nonce())
