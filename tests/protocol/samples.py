"""One valid instance of every protocol message, shared by the protocol tests."""

from __future__ import annotations

from pushjobs.protocol import messages as m

ENVELOPE = {
    "sender": "node-1",
    "incarnation": "inc-a",
    "sequence": 7,
    "timestamp": 1_700_000_000_000,
}
OUTPUT = m.JobOutput(stdout="hello\n", stderr="", stdout_truncated=True, stderr_truncated=False)
CONFIG = m.NodeConfig(
    server_id="srv-1",
    server_incarnation="inc-s",
    heartbeat_endpoint="tcp://127.0.0.1:10000",
    reply_endpoint="tcp://127.0.0.1:10001",
    server_ed25519_public="c2VydmVy",
    server_curve_public="rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
    interval_s=1.0,
    offline_threshold=3,
    online_threshold=2,
    max_skew_s=30.0,
    max_body_bytes=65536,
    session_key_id="node-1.k1",
    session_key_b64="a2V5",
    lifetime_s=3600.0,
)

SAMPLES: list[m.Message] = [
    m.ServerHeartbeat(**ENVELOPE, leader=True),
    m.NodeHeartbeat(
        **ENVELOPE, command_endpoint="tcp://127.0.0.1:9000", job_id="j1", job_state="running"
    ),
    m.NodeHeartbeat(**ENVELOPE, command_endpoint="tcp://127.0.0.1:9000"),
    m.AckCommit(**ENVELOPE, job_id="j1"),
    m.NackCommit(**ENVELOPE, job_id="j1", reason="busy"),
    m.AckRun(**ENVELOPE, job_id="j1"),
    m.NackRun(**ENVELOPE, job_id="j1", reason="not committed"),
    m.Started(**ENVELOPE, job_id="j1", pid=4242),
    m.Progress(**ENVELOPE, job_id="j1", message="50%"),
    m.Succeeded(**ENVELOPE, job_id="j1", exit_status=0, duration_ms=12, output=OUTPUT),
    m.Failed(**ENVELOPE, job_id="j1", exit_status=3, reason="exit status 3", duration_ms=5),
    m.Failed(**ENVELOPE, job_id="j1", exit_status=None, reason="spawn failed", duration_ms=0),
    m.Aborted(**ENVELOPE, job_id="j1", reason="abort requested", duration_ms=99, output=OUTPUT),
    m.Commit(
        **ENVELOPE,
        node="node-2",
        job_id="j1",
        command="uptime",
        options=m.RunOptions(
            timeout_s=30.5,
            env={"A": "1"},
            cwd="/tmp",
            user="nobody",
            capture=True,
            file=m.FilePayload(path="/tmp/x", content_b64="aGk=", mode=0o644),
        ),
    ),
    m.Commit(**ENVELOPE, node="node-2", job_id="j2", command="true"),
    m.Run(**ENVELOPE, node="node-2", job_id="j1"),
    m.Abort(**ENVELOPE, node="node-2", job_id="j1"),
    m.Ping(**ENVELOPE, node="node-2"),
    m.ConfigRequest(
        **ENVELOPE,
        command_endpoint="tcp://127.0.0.1:9000",
        ed25519_public="cHVi",
        curve_public="rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
        facts={"os": "linux"},
        tags=("web", "eu"),
    ),
    m.ConfigReply(**ENVELOPE, node="web-1", status="accepted", message="welcome", config=CONFIG),
    m.ConfigReply(**ENVELOPE, node="web-1", status="pending", message="waiting for an admin"),
    m.ApiRequest(**ENVELOPE, request_id="r1", method="job.start", params={"nodes": ["a"], "n": 1}),
    m.ApiReply(**ENVELOPE, request_id="r1", ok=True, result={"job_id": "j1", "nested": [1, None]}),
    m.ApiReply(
        **ENVELOPE, request_id="r1", ok=False, error=m.ErrorBody(code="not_found", message="no job")
    ),
]
