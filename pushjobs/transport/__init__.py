"""ZeroMQ adapters: the one socket factory, CurveZMQ authentication, receive helpers."""
