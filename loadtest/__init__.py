"""Load tests for posenc: locust user classes for the real traffic mix, an open-loop
microsecond latency probe, a raw ASGI floor to measure the probe against, and one command that
runs them all and writes a report. See docs/loadtest.md.

    python -m posenc.loadtest report
"""
