"""pushjobs: push jobs to a fleet and track every node to the end."""

__version__ = "0.1.0"
