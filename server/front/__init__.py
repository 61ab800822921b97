"""The server's API front: requests verified, checked for their role, handled and answered;
watches; enrolment and admission of nodes; key and schedule administration.

Imports ``server.core`` and ``server.shell``."""
