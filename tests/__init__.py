"""posenc's test suite, a package mirroring the installed one: tests/engine (posenc.engine,
in-process), tests/service (posenc.service driven in-process beside one engine process) and
tests/integration (real processes: engines, `posenc serve`, readers, the CLI, load tests, the
image and deploy/). Shared helpers live here (procs, shm, numeric, service_cases); programs
that tests start as processes live in tests/children and run by path."""
