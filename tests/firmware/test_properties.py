"""Properties of the firmware planner under any interleaving of reports, reboots, time, lost
status writes (a controller killed between acting and writing, or after only some of a pass's
actions) and person's cordons."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.firmware.actions import RunRebootHook
from reconciler.firmware.model import FirmwareRequest, FirmwareSettings, StageTimeouts
from tests.firmware.world import World

OPS = st.lists(st.tuples(st.sampled_from(["report", "boot", "advance", "lose", "kill", "step"]),
                         st.integers(0, 5)), min_size=5, max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, limit=st.integers(1, 3), cordoned=st.sets(st.integers(0, 5), max_size=3))
def test_hook_flow_invariants(ops: list[tuple[str, int]], limit: int, cordoned: set[int]) -> None:
    world = World.of(6, settings=FirmwareSettings(
        reboot_mode="hook", reboot_command=("reboot",), max_concurrent_reboots=limit,
        timeouts=StageTimeouts(upgrade=0, reboot=0, verify=0)))
    names = sorted(world.nodes)
    for index in cordoned:
        world.nodes[names[index]].unschedulable = True
    world.request = FirmwareRequest("PreferCloud", False, "p")
    rebooted: dict[str, int] = {}
    seen_tokens: set[str] = set()

    def reboot_requested() -> None:
        # the hook's effect: one reboot per token, like the simulator
        for hook in world.hooks:
            if hook.token not in seen_tokens:
                seen_tokens.add(hook.token)
                world.reboot(hook.node, come_back=False)
                rebooted[hook.node] = rebooted.get(hook.node, 0) + 1

    def check() -> None:
        rebooting = [n for n, s in world.stages().items() if s == "rebooting"]
        assert len(rebooting) <= limit, (rebooting, limit)
        down = [n for n in world.nodes.values() if not n.ready]
        assert len(down) <= limit
        if world.status.get("phase") not in (None, "Idle", "Cordoning") and \
                world.driver.get("fwUpgradePolicy") == "PreferCloud":
            assert all(n.unschedulable for n in world.nodes.values())

    for op, arg in ops:
        if op == "report":
            world.report()
        elif op == "boot":
            down = [n for n in names if not world.nodes[n].ready]
            if down:
                world.boot(down[arg % len(down)])
        elif op == "advance":
            world.advance(arg * 10)
        elif op == "lose":
            world.step(lose_status=True)
        elif op == "kill":
            world.step(acted=arg)
        else:
            world.step()
        reboot_requested()
        check()
    # then everything behaves until the end
    for _ in range(100):
        if world.status.get("phase") == "Completed":
            break
        world.report()
        for name in names:
            if not world.nodes[name].ready:
                world.boot(name)
        world.step()
        reboot_requested()
        check()
    assert world.status["phase"] == "Completed", world.status
    assert rebooted == dict.fromkeys(names, 1)  # each node rebooted once, whatever happened
    assert len({h.token for h in world.hooks if isinstance(h, RunRebootHook)}) == 6
    assert {n: world.nodes[n].unschedulable for n in names} == {
        n: i in cordoned for i, n in enumerate(names)}
    assert world.driver["fwUpgradePolicy"] == "Never"
