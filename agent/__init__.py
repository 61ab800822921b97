"""The pushjobs node agent (``pushjobs-agent``)."""
