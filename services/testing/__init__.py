"""Test doubles and seeded inputs that ship with Governor, as ``structlog.testing`` ships with structlog.

Its tests and its benchmarks (ops/bench/) use them alike: synthetic telemetry streams
(``streams``), FleetOpt plans of a real planner decision (``plans``), in-process stand-ins
for vLLM servers with a gateway in front (``upstream``), and a topic's partitions in memory for the
partition loop (``memory_source``). Nothing in the services imports them, and
they are imported by module: the package itself exports nothing, so importing one of them does
not bring in the others (the gateway's stand-ins load aiohttp and the gateway).
"""

__all__: list[str] = []
