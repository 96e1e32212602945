"""``governor fleet up`` without vLLM: its flags, its workload, its gateway files and its comparison."""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path

import pytest

from services.cli.fleet import (
    DP_GROUP,
    GOVERNED,
    LONG_POOL,
    ROUND_ROBIN,
    ROUND_ROBIN_GROUP,
    SHORT_POOL,
    arm_order,
    governed_config,
    policy_config,
    round_robin_config,
    settled,
)
from services.cli.main import build_parser
from services.engines.vllm.tiny_servers import WORDS, vocabulary, word_token_ids
from services.fleet_run.client import Outcome
from services.fleet_run.processes import Server
from services.fleet_run.report import (
    AppliedDocument,
    applied_by_scope,
    applied_documents,
    comparison_table,
    counter_total,
    rank_imbalance,
    spread,
    spread_table,
    summarise,
)
from services.fleet_run.workload import SAFE_CATEGORY, burst, workload
from services.policy.config import parse_config
from tests.unit.gateway.documents import NOW_S, admission


def _served(index: int, upstream: str, *, sent_s: float, ttft_s: float, e2e_s: float, tokens: int) -> Outcome:
    return Outcome(
        index=index,
        sent_s=sent_s,
        status=200,
        upstream=upstream,
        prompt_words=10,
        max_tokens=tokens,
        ttft_s=ttft_s,
        e2e_s=e2e_s,
        tokens=tokens,
    )


def _refused(index: int, reason: str | None = None) -> Outcome:
    return Outcome(
        index=index,
        sent_s=0.5,
        status=429,
        upstream=None,
        prompt_words=10,
        max_tokens=8,
        ttft_s=None,
        e2e_s=None,
        tokens=None,
        shed_reason=reason,
        retry_after_s=None if reason is None else 10,
    )


def test_flags_parse_with_their_defaults() -> None:
    args = build_parser("fleet").parse_args(["fleet", "up"])
    assert (args.requests, args.rate, args.max_num_seqs, args.seeds, args.keep) == (24, 1.0, 4, [0], False)
    assert (args.warmup_requests, args.warmup_rate, args.plan_timeout_s) == (60, 2.0, 90.0)
    args = build_parser("fleet").parse_args(["fleet", "up", "--requests", "8", "--rate", "0.5", "--seeds", "3", "4"])
    assert (args.requests, args.rate, args.seeds) == (8, 0.5, [3, 4])
    with pytest.raises(SystemExit):
        build_parser("fleet").parse_args(["fleet", "up", "--requests", "many"])


def test_the_workload_is_seeded_and_fits_the_tiny_model() -> None:
    first = workload(7, 40, 2.0)
    assert first == workload(7, 40, 2.0)
    assert first != workload(8, 40, 2.0)
    assert [r.index for r in first] == list(range(40))
    assert all(a.at_s < b.at_s for a, b in itertools.pairwise(first))
    # The servers' window is 512 tokens; the word-level tokenizer makes one token of each word and each mark.
    assert all(r.prompt_words + r.prompt.count(".") + r.prompt.count("?") + r.max_tokens <= 512 for r in first)
    assert {r.category for r in first} == {SAFE_CATEGORY, None}
    with pytest.raises(ValueError, match="positive"):
        workload(0, 0, 1.0)


def test_gateway_files_name_the_pools_and_the_round_robin_group(tmp_path: Path) -> None:
    governed = tomllib.loads(governed_config(30.0, 8))
    assert governed["queue"] == {"deadline_s": 30.0, "max_waiting": 8}
    assert governed["routing"] == {"short_pool": SHORT_POOL, "long_pool": LONG_POOL}
    assert governed["bfio"]["balancer"] == "bfio"
    assert "upstreams" not in governed  # they come from the servers' registrations
    servers = [
        Server(
            engine_id=f"e-{i}",
            pool=LONG_POOL,
            url=f"http://127.0.0.1:{9000 + i}",
            dp_group=DP_GROUP if i < 2 else None,
            dp_rank=i if i < 2 else None,
            max_num_seqs=4,
            log=tmp_path / f"{i}.log",
            process=None,  # type: ignore[arg-type]
        )
        for i in range(3)
    ]
    plain = tomllib.loads(round_robin_config(servers, 30.0))
    assert plain["bfio"]["balancer"] == "round_robin"
    assert plain["queue"]["deadline_s"] == 30.0
    assert [(u["engine_id"], u["dp_group"], u["dp_rank"]) for u in plain["upstreams"]] == [
        ("e-0", ROUND_ROBIN_GROUP, 0),
        ("e-1", ROUND_ROBIN_GROUP, 1),
        ("e-2", ROUND_ROBIN_GROUP, 2),
    ]


def test_counters_sum_over_their_labels() -> None:
    text = (
        "# HELP governor_gateway_shed_total requests shed\n"
        "# TYPE governor_gateway_shed_total counter\n"
        'governor_gateway_shed_total{deployment="d",reason="deadline"} 2.0\n'
        'governor_gateway_shed_total{deployment="d",reason="queue_full"} 1.0\n'
        'governor_gateway_shed_created{deployment="d",reason="deadline"} 1.7e9\n'
        'governor_gateway_compressed_total{deployment="d"} 4.0\n'
    )
    assert counter_total(text, "governor_gateway_shed_total") == 3
    assert counter_total(text, "governor_gateway_compressed_total") == 4
    assert counter_total(text, "governor_gateway_routed_total") == 0


def test_applied_documents_come_from_the_policy_applied_lines() -> None:
    lines = [
        "not json",
        json.dumps({"event": "upstream_registered", "upstream": "e-0"}),
        json.dumps({"event": "policy_applied", "kind": "admission", "scope": "e-0", "version": 3}),
        json.dumps({"event": "policy_applied", "kind": "bfio", "scope": DP_GROUP, "version": 1}),
    ]
    assert applied_documents(lines) == (
        AppliedDocument(kind="admission", scope="e-0", version=3),
        AppliedDocument(kind="bfio", scope=DP_GROUP, version=1),
    )


def test_applied_documents_are_shown_per_kind_and_scope() -> None:
    applied = [
        AppliedDocument(kind="bfio", scope=DP_GROUP, version=9),
        AppliedDocument(kind="admission", scope="e-0", version=1),
        AppliedDocument(kind="bfio", scope=DP_GROUP, version=12),
        AppliedDocument(kind="bfio", scope=DP_GROUP, version=18),
    ]
    assert applied_by_scope(applied) == [f"bfio {DP_GROUP} v9-v18 (3 versions)", "admission e-0 v1"]
    assert applied_by_scope([]) == []


def test_rank_imbalance_is_zero_for_equal_ranks_and_one_when_one_rank_holds_everything() -> None:
    even = [
        _served(0, "r0", sent_s=0.0, ttft_s=0.5, e2e_s=2.0, tokens=16),
        _served(1, "r1", sent_s=0.0, ttft_s=0.5, e2e_s=2.0, tokens=16),
    ]
    assert rank_imbalance(even, ["r0", "r1"]) == pytest.approx((0.0, 0.0))
    lopsided = [_served(0, "r0", sent_s=0.0, ttft_s=0.5, e2e_s=2.0, tokens=16), _refused(1)]
    assert rank_imbalance(lopsided, ["r0", "r1"]) == pytest.approx((1.0, 1.0))
    assert rank_imbalance(lopsided, ["r0"]) is None
    assert rank_imbalance([_refused(0)], ["r0", "r1"]) is None


def test_summary_of_a_recorded_run() -> None:
    outcomes = [
        _served(0, "r0", sent_s=0.0, ttft_s=0.2, e2e_s=1.2, tokens=11),
        _served(1, "r1", sent_s=1.0, ttft_s=0.4, e2e_s=3.0, tokens=27),
        _served(2, "short", sent_s=2.0, ttft_s=0.1, e2e_s=0.6, tokens=6),
        _refused(3),
    ]
    before = 'governor_gateway_shed_total{reason="deadline"} 1.0\ngovernor_gateway_compressed_total 3.0\n'
    after = 'governor_gateway_shed_total{reason="deadline"} 2.0\ngovernor_gateway_compressed_total 5.0\n'
    log = [json.dumps({"event": "policy_applied", "kind": "fleetopt", "scope": "fleet", "version": 2})]
    summary = summarise(
        "governed", outcomes, ranks=["r0", "r1"], metrics_before=before, metrics_after=after, log_lines=log
    )
    assert (summary.requests, summary.served, summary.refused, summary.shed, summary.compressed) == (4, 3, 1, 1, 2)
    assert summary.makespan_s == pytest.approx(4.0)  # first send at 0, last end at 1 + 3
    assert summary.output_tokens_per_s == pytest.approx(44 / 4.0)
    assert summary.ttft_p50_ms == pytest.approx(200.0)
    assert summary.tpot_p50_ms == pytest.approx(100.0)  # (1.2 - 0.2) / 10, (3 - 0.4) / 26, (0.6 - 0.1) / 5
    assert summary.requests_per_upstream == {"r0": 1, "r1": 1, "short": 1}
    assert summary.rank_imbalance_mean is not None
    assert summary.applied == (AppliedDocument(kind="fleetopt", scope="fleet", version=2),)
    assert json.loads(json.dumps(summary.to_dict()))["applied"] == [
        {"kind": "fleetopt", "scope": "fleet", "version": 2}
    ]
    plain = summarise(
        "round-robin", outcomes[:3], ranks=["r0", "r1"], metrics_before="", metrics_after="", log_lines=[]
    )
    table = comparison_table(summary, plain)
    assert "TTFT p50 ms" in table
    assert "documents the governed gateway applied: fleetopt fleet v2" in table
    assert "documents the round-robin gateway applied: none" in table


def test_outcomes_round_trip_through_json() -> None:
    outcome = _served(0, "r0", sent_s=0.0, ttft_s=0.2, e2e_s=1.2, tokens=11)
    assert Outcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome


def test_only_the_long_requests_end_at_natural_stop_words() -> None:
    stops = word_token_ids(20)
    assert len(stops) == 20
    words = set(WORDS.split())
    assert all(vocabulary()[i] in words for i in stops)
    planned = workload(5, 60, 2.0, stops)
    assert {r.stop_token_ids for r in planned if r.max_tokens >= 96} == {stops}
    assert {r.stop_token_ids for r in planned if r.max_tokens <= 32} == {()}
    assert [r.prompt for r in planned] == [r.prompt for r in workload(5, 60, 2.0)]


def test_the_arms_alternate_which_goes_first_over_the_seeds() -> None:
    assert [arm_order(i) for i in range(4)] == [
        (GOVERNED, ROUND_ROBIN),
        (ROUND_ROBIN, GOVERNED),
        (GOVERNED, ROUND_ROBIN),
        (ROUND_ROBIN, GOVERNED),
    ]


def test_the_burst_is_seeded_short_and_uncompressible() -> None:
    first = burst(3, 50, 8.0)
    assert first == burst(3, 50, 8.0)
    assert first != burst(4, 50, 8.0)
    assert all(8 <= r.max_tokens <= 24 and r.category is None for r in first)
    # at most three sentences and the question: far below any short-pool bound planned for the main workload
    tokens = [r.prompt_words + r.prompt.count(".") + r.prompt.count("?") for r in first]
    assert max(tokens) < 50
    assert max(t + r.max_tokens for t, r in zip(tokens, first, strict=True)) < 75
    assert first[-1].at_s < 50 / 8.0 * 2
    with pytest.raises(ValueError, match="positive"):
        burst(0, 10, 0.0)


def test_the_run_policy_file_is_valid_and_changes_only_eb_plus_pace_and_admission_rise() -> None:
    config = parse_config(tomllib.loads(policy_config()), "fleet policy file")
    assert (config.ebplus.t_upd_completions, config.ebplus.w_min_samples) == (20, 20)
    assert config.admission.smoothing_up == 1.0
    assert config.admission.busy_at is None  # thresholds keep their defaults
    assert config.slai.token_budget_tokens is None


def test_refusals_are_counted_by_the_gateway_s_reason() -> None:
    outcomes = [
        _served(0, "short", sent_s=0.0, ttft_s=0.1, e2e_s=0.5, tokens=8),
        _refused(1, "deadline"),
        _refused(2, "queue_full"),
        _refused(3, "queue_full"),
        _refused(4),
    ]
    summary = summarise("burst", outcomes, ranks=[], metrics_before="", metrics_after="", log_lines=[])
    assert summary.refused_by_reason == {"deadline": 1, "queue_full": 2, "status-429": 1}
    assert "refused by reason" in comparison_table(summary, summary)
    assert "documents the" not in comparison_table(summary, summary, documents=False)


def test_spread_is_the_median_and_range_of_the_figures_that_exist() -> None:
    assert spread([3.0, None, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert spread([None]) is None
    one = summarise(
        "a",
        [_served(0, "r0", sent_s=0.0, ttft_s=0.1, e2e_s=1.0, tokens=10)],
        ranks=[],
        metrics_before="",
        metrics_after="",
        log_lines=[],
    )
    two = summarise(
        "a",
        [_served(0, "r0", sent_s=0.0, ttft_s=0.3, e2e_s=1.0, tokens=10)],
        ranks=[],
        metrics_before="",
        metrics_after="",
        log_lines=[],
    )
    table = spread_table([[one, two], [one]], ["governed", "round-robin"])
    ttft = next(line for line in table.splitlines() if line.startswith("TTFT p50 ms"))
    assert "200 [100, 300]" in ttft
    assert "100 [100, 100]" in ttft
    imbalance = next(line for line in table.splitlines() if line.startswith("DP rank imbalance mean"))
    assert imbalance.split()[-2:] == ["-", "-"]


def test_outcomes_written_before_refusal_reasons_existed_still_load() -> None:
    fields = _refused(0).to_dict()
    del fields["shed_reason"], fields["retry_after_s"]
    assert Outcome.from_dict(fields) == _refused(0)


def test_an_engine_settles_after_a_burst_only_on_an_ok_decided_since_or_an_expired_document() -> None:
    ok = admission("short-0", "ok")  # computed at NOW_S - 1, valid until NOW_S + 60
    overloaded = admission("short-0", "overloaded")
    assert settled(ok, since_s=NOW_S - 2.0, now_s=NOW_S)
    assert not settled(ok, since_s=NOW_S, now_s=NOW_S)  # an ok decided before the burst ended says nothing
    assert not settled(overloaded, since_s=NOW_S - 2.0, now_s=NOW_S)
    assert settled(overloaded, since_s=NOW_S, now_s=NOW_S + 61.0)  # expired: the gateway falls back to ok
    assert settled(None, since_s=NOW_S, now_s=NOW_S)
