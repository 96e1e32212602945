"""``governor fleet up``: one end-to-end run on real vLLM servers behind the gateway, governed vs round robin.

``workload`` makes the seeded prompts and the overload burst, ``client`` sends them through a gateway and
records what each got, ``report`` turns recorded runs into the comparison and its spread over seeds, ``ledger``
reads back what each policy decided and who applied it, ``processes`` starts and stops the servers and the
gateways. The command itself is services/cli/fleet.py.
"""

from services.fleet_run.client import Outcome, drive
from services.fleet_run.ledger import RunLedger, ledger_of, read_ledger
from services.fleet_run.report import ArmSummary, comparison_table, spread_table, summarise
from services.fleet_run.workload import PlannedRequest, burst, workload

__all__ = [
    "ArmSummary",
    "Outcome",
    "PlannedRequest",
    "RunLedger",
    "burst",
    "comparison_table",
    "drive",
    "ledger_of",
    "read_ledger",
    "spread_table",
    "summarise",
    "workload",
]
