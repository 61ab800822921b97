"""The ``pushjobs`` command line: a thin client that builds a request, calls, renders."""
