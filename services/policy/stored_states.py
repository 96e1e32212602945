"""The policy service's stored state of its partitions, and the one-time read of the layout it used before.

The service commits its own state (configurations, shadows, snapshot ledgers, fleet aggregators) with
its offsets under ``gov:{dep}:service-state:policy:{scope}`` (``schemas.names.state_key``). Before that
namespace it used the engines' layout, ``gov:{dep}:est:{scope}:state``, where an engine named
``policy-config`` or ``fleet-fleetopt`` overwrote it (and was overwritten by it).

Upgrading keeps the applied offsets, so nothing would rebuild that state from the log: the service
would resume past its offsets with the built-in configuration, no shadows, and empty ledgers and
aggregators. Instead, a partition is *upgraded* when it has an applied offset but no configuration
state in the new layout. No later state has that shape: every commit writes the configuration of
each partition it holds together with the offsets, and neither a log reset (which forgets the
offset and keeps the configuration) nor a flush (which deletes both layouts) makes it. An upgraded
partition's states (its configuration, shadows, ledger, and the fleet aggregators where it is the
``fleet`` partition) are read from the old layout wherever the new one has none, once: the next
commit writes them under the new keys, and the partition is never upgraded again. The old keys are
left where they are, because an engine may own one: an engine named ``policy-config`` holds
``gov:{dep}:est:policy-config:state`` now. Where such an engine had overwritten the service's state
before the upgrade, the value read is the engine's; the service reports it unreadable and starts
that part empty, as it would without it (``PolicyHandler.restore``).
"""

from __future__ import annotations

import structlog

from schemas.names import ESTIMATES_TOPIC, POLICY_CONSUMER
from services.policy.decisions import FLEET_STATE_PREFIX
from services.policy.handler import PolicyHandler, config_scope, ledger_scope, scope_parts
from services.policy.shadow import SHADOW_STATE_PREFIX
from services.store.protocol import Store

log = structlog.get_logger(__name__)


def load_policy_states(
    store: Store,
    handler: PolicyHandler,
    partitions: list[int],
    applied: dict[str, int],
    fleet_partition: int | None,
) -> dict[str, str]:
    """The stored states of ``partitions`` by scope, for ``PolicyHandler.restore``.

    Args:
        store: where the service committed them.
        handler: reads the configurations to learn which shadows' and aggregators' states there are.
        partitions: the ``gov.estimates`` partitions this member owns.
        applied: the service's applied offsets, ``"topic:partition" -> offset``.
        fleet_partition: the ``fleet`` partition where this member owns it (its aggregators are
            loaded), else None.
    """
    configs = store.load_states(POLICY_CONSUMER, [config_scope(p) for p in partitions])
    upgraded = [p for p in partitions if f"{ESTIMATES_TOPIC}:{p}" in applied and config_scope(p) not in configs]
    old = store.load_legacy_states([config_scope(p) for p in upgraded])
    configs |= old
    states = configs | store.load_states(POLICY_CONSUMER, [ledger_scope(p) for p in partitions])
    scopes = handler.state_scopes(configs, fleet_partition)
    states |= store.load_states(POLICY_CONSUMER, scopes)
    if upgraded:
        carried = [ledger_scope(p) for p in upgraded if ledger_scope(p) not in states]
        carried += [scope for scope in scopes if scope not in states and _upgraded(scope, upgraded, fleet_partition)]
        old |= store.load_legacy_states(carried)
        states |= old
        log.warning("service_state_read_from_old_layout", partitions=upgraded, scopes=sorted(old))
    return states


def _upgraded(scope: str, upgraded: list[int], fleet_partition: int | None) -> bool:
    """Whether the shadow or aggregator state ``scope`` belongs to an upgraded partition.

    A shadow's scope carries its partition as ``partition_scope`` spells it (``shadow-x``, ``shadow-x:3``);
    the aggregators belong to the ``fleet`` partition.
    """
    if scope.startswith(FLEET_STATE_PREFIX):
        return fleet_partition in upgraded
    if scope.startswith(SHADOW_STATE_PREFIX):
        return scope_parts(scope)[1] in upgraded
    return False
