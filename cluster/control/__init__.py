"""The control plane: the deploy spec, placement planning, live reconcile and the CLI."""
