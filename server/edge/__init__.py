"""An edge of the server: the per-node, per-message work, for a share of the fleet."""
