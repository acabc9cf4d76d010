"""Syntax-tree facts and data flow that the rules share (one walk per module)."""
