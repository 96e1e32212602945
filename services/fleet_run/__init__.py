"""``governor fleet up``: one end-to-end run on real vLLM servers behind the gateway, governed vs round robin.

``workload`` makes the seeded prompts, ``client`` sends them through a gateway and records what each got,
``report`` turns two recorded runs into the comparison, ``processes`` starts and stops the servers and the
gateways. The command itself is services/cli/fleet.py.
"""

from services.fleet_run.client import Outcome, drive
from services.fleet_run.report import ArmSummary, comparison_table, summarise
from services.fleet_run.workload import PlannedRequest, workload

__all__ = ["ArmSummary", "Outcome", "PlannedRequest", "comparison_table", "drive", "summarise", "workload"]
