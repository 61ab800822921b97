"""The pushjobs server daemon (``pushjobs-server``)."""
