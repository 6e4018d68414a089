"""Program -> program rewrites: register promotion, band folding (each proved with the
polyhedral model where it needs a proof)."""
