"""The engine process and its upkeep: ``Engine`` (core.py) with what it publishes (manifest.py),
its socket (socket.py), its command lines (cli.py, main.py), its counts (stats.py), room and
integrity (upkeep.py), the configured tables (configured.py) and their cold start (coldstart.py),
the keeper that holds their descriptors across a restart (keeper.py) and adoption from it
(adopt.py), which code built a table (built_by.py), process life (proclife.py) and log lines
(logs.py). Nothing in the engine below it imports it.
"""
