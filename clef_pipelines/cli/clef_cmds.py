"""`serve` and `check`: the Clef commands (see issue 3)."""
