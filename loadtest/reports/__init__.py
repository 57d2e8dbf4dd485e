"""What a run writes: summary.md (summary.py), its figures (figures.py), latency.png (plot.py),
the mix's sections (mix.py) and which way posenc answered (paths.py)."""
