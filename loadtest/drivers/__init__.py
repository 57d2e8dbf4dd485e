"""What sends it and measures: the open-loop probe (probe.py, its sender chosen by sender.py: the
C loadtest/_sender.c or pyloop.py), locust headless (locustrun.py), wrk (wrk.py) and h2load
(h2load.py)."""
