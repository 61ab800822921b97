"""systemd units of the two daemons, shipped as package data (``pushjobs systemd install``).

``@BINDIR@`` in each unit is replaced by the directory holding the console scripts.
"""
