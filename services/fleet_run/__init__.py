"""``governor fleet up``: one end-to-end run on real vLLM servers behind the gateway, governed vs round robin.

``workload`` makes the seeded prompts, ``client`` sends them through a gateway and records what each got,
``report`` turns two recorded runs into the comparison, ``processes`` starts and stops the servers and the
gateways. The command itself is services/cli/fleet.py.
"""
