"""CLI numbers (issue 15, item 9): ``nan``, ``inf``, ``1e309``, negative and absurd values of every
numeric option of every command are usage errors (exit 2) that name the option, never a
traceback, a run that starts, or a MemoryError a minute later. Every run is a child process
bounded in time and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.policy.commands import reconciler
from tests.policy.texts import SEED_10

pytestmark = pytest.mark.slow  # CLI runs as child processes: minutes on a loaded machine

#: what no numeric option accepts
NOT_FINITE = ["nan", "NaN", "inf", "-inf", "+Infinity", "1e309", "-1e309"]
HUGE_INTS = ["1000000000", "1" + "0" * 30, "9" * 5000]
NEGATIVE = ["-1", "-0.5"]
BAD = [*NOT_FINITE, *HUGE_INTS, *NEGATIVE]

#: (the command line before the option, the option)
OPTIONS: list[tuple[list[str], str]] = [
    *[(["simulate", "{policy}", "--nodes", "10", "--from-version", "1.0.0.0"], option)
      for option in ("--install-seconds", "--auto-confirm", "--until", "--ready-timeout",
                     "--serving-pods", "--pods-per-budget", "--budget-max-unavailable",
                     "--drain-seconds", "--reschedule-seconds")],
    (["simulate", "{policy}", "--from-version", "1.0.0.0"], "--nodes"),
    *[(["dev-cluster", "up", "--dir", "{state}"], option)
      for option in ("--nodes", "--seed", "--timeout", "--install-seconds")],
    (["dev-cluster", "down", "--dir", "{state}"], "--timeout"),
    *[(["demo", "--workdir", "{state}"], option)
      for option in ("--nodes", "--install-seconds", "--review-seconds", "--timeout")],
    *[(["run", "--role", "controller", "--ops-listen", "off"], option)
      for option in ("--fetch-interval", "--status-min-interval", "--ready-timeout",
                     "--lease-duration", "--renew-deadline", "--retry-period")],
]


@pytest.mark.parametrize(("before", "option"), OPTIONS,
                         ids=[f"{b[0]}{'-' + b[1] if b[1][0] != '-' else ''}{o}"
                              for b, o in OPTIONS])
def test_every_numeric_option_refuses_non_finite_huge_and_negative_values(
    tmp_path: Path, before: list[str], option: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10)
    state = tmp_path / "state"
    args = [a.format(policy=policy, state=state) for a in before]
    for value in BAD:
        if option == "--seed" and value in HUGE_INTS[:1]:
            continue  # a seed of a billion is a fine seed
        if option == "--until" and value in HUGE_INTS[:1]:
            continue  # virtual time: 31 years cost nothing (the bound is year 9999)
        result = reconciler(tmp_path, *args, f"{option}={value}", timeout=30)
        shown = value[:20]
        assert result.returncode == 2, (option, shown, result.stderr[-500:])
        assert "Traceback" not in result.stderr, (option, shown, result.stderr[-2000:])
        assert option in result.stderr or option.strip("-") in result.stderr, \
            (option, shown, result.stderr[-500:])
        assert not state.exists(), f"{option}={shown} started something"


@pytest.mark.parametrize("value", ["3-nan", "nan-9", "0-inf", "1e309", "5-1", "1-1e10"])
def test_dev_cluster_install_seconds_ranges_are_finite(tmp_path: Path, value: str) -> None:
    result = reconciler(tmp_path, "dev-cluster", "up", "--dir", str(tmp_path / "s"),
                        "--install-seconds", value, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "--install-seconds" in result.stderr and "(from 0 to 31536000)" in result.stderr


def test_help_states_the_bounds(tmp_path: Path) -> None:
    simulate = " ".join(reconciler(tmp_path, "simulate", "--help").stdout.split())
    assert "at most 100,000" in simulate and "1<=x<=100000" in simulate
    assert "0<=x<=31536000" in simulate  # a year, for the seconds options
    up = " ".join(reconciler(tmp_path, "dev-cluster", "up", "--help").stdout.split())
    assert "0<=x<=10000" in up and "at most 10,000" in up
    assert "LOW-HIGH, from 0 to 31536000 (a year)" in up


def test_absurd_fleet_sizes_are_refused_at_once(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10)
    result = reconciler(tmp_path, "simulate", str(policy), "--nodes", "1000000000",
                        "--from-version", "1.0.0.0", timeout=30)
    assert result.returncode == 2
    assert "Invalid value for '--nodes': 1000000000 is not in the range 1<=x<=100000" \
        in result.stderr
    # the largest allowed fleet runs (it is linear): the bound is a real one, not a guess
    result = reconciler(tmp_path, "simulate", str(policy), "--nodes", "100000",
                        "--from-version", "2.32.0.6", "--auto-confirm", "1", "--format", "json",
                        timeout=300)
    assert result.returncode == 0, result.stderr[-500:]


@pytest.mark.parametrize("value", ["0", "65", "-1", "nan", "99999999999", "٣"])
def test_reconciler_jobs_out_of_range_is_a_usage_error(tmp_path: Path, value: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10)
    result = reconciler(tmp_path, "validate", "policy.yaml", env={"RECONCILER_JOBS": value})
    assert result.returncode == 2, result.stderr
    assert "RECONCILER_JOBS must be a number of processes from 1 to 64" in result.stderr


@pytest.mark.parametrize("address", [":" + "9" * 5000, ":99999", ":nan", ":inf"])
def test_listen_addresses_with_absurd_ports_are_usage_errors(
    tmp_path: Path, address: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "
        "'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    result = reconciler(tmp_path, "run", "--role", "controller", "--kubeconfig", str(kubeconfig),
                        "--ops-listen", address, timeout=30)
    assert result.returncode == 2, result.stderr[-500:]
    assert "--ops-listen" in result.stderr and "Traceback" not in result.stderr
