"""Text generation: the step a generation bundle compiles, its KV cache (docs/generation.md)."""
