"""Tiling and fusion of einsum chains under an on-chip capacity (issue 11's planner)."""
