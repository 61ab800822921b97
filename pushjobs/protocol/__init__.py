"""The pure protocol core: messages, codec, framing, signing, replay window, liveness.

Nothing in this package imports zmq, sqlite3, time or threading: bytes and ``now`` in,
messages and events out.
"""
