"""The tamper-evident audit trail over the ordered log.

``chain`` links the records each writer appends (pure), ``checkpoint`` is the signed
statement a writer makes of its chains (pure), ``verifier`` checks a log against both
(pure), ``story`` tells one job's story from the log alone (pure). The server wires the
writer side in ``server/shell/auditlog.py``; ``pushjobs audit`` is the front.
"""
