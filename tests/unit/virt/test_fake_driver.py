"""The fake driver: capacity, power operations, failure modes, and a state file shared by processes."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.host.messages import FixedIp, FlavorSpec, InstanceSpec, NetworkSpec
from novakit.virt import GUEST_READY_MARKER, admin_password_line
from novakit.virt.driver import load_driver
from novakit.virt.fake import FakeDriver, failure_env_var

MakeInstance = Callable[..., InstanceSpec]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "fake"


@pytest.fixture
def driver(state_dir: Path) -> FakeDriver:
    drv = FakeDriver("compute-1", {"state_dir": str(state_dir)})
    drv.init_host()
    return drv


def test_loaded_by_name_and_reports_configured_capacity(state_dir: Path, make_instance: MakeInstance) -> None:
    drv = load_driver("fake", "compute-1", {"state_dir": str(state_dir), "vcpus": 8, "memory_mb": 4096})
    assert isinstance(drv, FakeDriver)
    drv.spawn(
        make_instance(flavor=FlavorSpec(name="m1.small", vcpus=2, memory_mb=1024, root_gb=10, swap=512))
    )
    res = drv.get_available_resource()
    assert (res.hypervisor_type, res.cpu_arch, res.hypervisor_hostname) == ("fake", "x86_64", "compute-1")
    assert (res.vcpus, res.memory_mb, res.local_gb) == (8, 4096, 500)
    assert (res.vcpus_used, res.memory_mb_used, res.local_gb_used) == (2, 1024, 11)
    assert res.cached_images == ["img-tiny"]


def test_defaults_and_state_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVAKIT_FAKE_STATE_DIR", str(tmp_path / "env-dir"))
    drv = FakeDriver("c2")
    drv.init_host()
    assert drv.state_file == tmp_path / "env-dir" / "c2.json"
    res = drv.get_available_resource()
    assert (res.vcpus, res.memory_mb, res.local_gb, res.cached_images) == (16, 32768, 500, [])


def test_host_name_cannot_escape_the_state_dir(state_dir: Path) -> None:
    drv = FakeDriver("../../etc/passwd", {"state_dir": str(state_dir)})
    drv.init_host()
    assert drv.state_file.parent == state_dir
    assert [p.name for p in state_dir.glob("*.json")] == [drv.state_file.name]


def test_spawn_then_every_power_operation(driver: FakeDriver, make_instance: MakeInstance) -> None:
    inst = make_instance()
    driver.spawn(inst)
    steps = [
        (driver.pause, PowerState.PAUSED),
        (driver.unpause, PowerState.RUNNING),
        (driver.suspend, PowerState.SUSPENDED),
        (driver.resume, PowerState.RUNNING),
        (driver.power_off, PowerState.SHUTDOWN),
        (driver.power_on, PowerState.RUNNING),
        (lambda i: driver.reboot(i, "SOFT"), PowerState.RUNNING),
        (lambda i: driver.reboot(i, "HARD"), PowerState.RUNNING),
    ]
    assert driver.get_info(inst).state is PowerState.RUNNING
    for op, expected in steps:
        op(inst)
        assert driver.get_info(inst).state is expected
    assert driver.list_instances() == {inst.uuid: PowerState.RUNNING}


def test_reboot_starts_a_stopped_guest(driver: FakeDriver, make_instance: MakeInstance) -> None:
    inst = make_instance()
    driver.spawn(inst)
    driver.power_off(inst)
    driver.reboot(inst, "SOFT")
    assert driver.get_info(inst).state is PowerState.RUNNING


def test_power_operations_refuse_a_wrong_state(driver: FakeDriver, make_instance: MakeInstance) -> None:
    inst = make_instance()
    driver.spawn(inst)
    driver.power_off(inst)
    with pytest.raises(exceptions.InstanceNotRunning):
        driver.pause(inst)
    with pytest.raises(exceptions.InstanceNotRunning):
        driver.suspend(inst)
    with pytest.raises(exceptions.ComputeError, match="cannot unpause .* SHUTDOWN, not PAUSED"):
        driver.unpause(inst)
    with pytest.raises(exceptions.ComputeError, match="cannot resume .* SHUTDOWN, not SUSPENDED"):
        driver.resume(inst)
    assert driver.get_info(inst).state is PowerState.SHUTDOWN


def test_operations_on_a_missing_guest_raise_not_found(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    inst = make_instance()
    for op in (
        driver.get_info,
        driver.power_off,
        driver.power_on,
        driver.reboot,
        driver.pause,
        driver.unpause,
        driver.suspend,
        driver.resume,
        driver.get_console_output,
        driver.get_interface_addresses,
    ):
        with pytest.raises(exceptions.InstanceNotFound, match=inst.uuid):
            op(inst)


def test_destroy_is_idempotent(driver: FakeDriver, make_instance: MakeInstance) -> None:
    inst = make_instance()
    driver.spawn(inst)
    driver.destroy(inst)
    driver.destroy(inst)
    assert driver.list_instances() == {}
    assert driver.get_available_resource().vcpus_used == 0


def test_duplicate_uuid_is_refused_without_touching_the_first(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    inst = make_instance()
    driver.spawn(inst)
    driver.pause(inst)
    with pytest.raises(exceptions.BuildAbortError, match="already exists"):
        driver.spawn(inst)
    assert driver.get_info(inst).state is PowerState.PAUSED


def test_addresses_are_stable_and_in_test_net_1(driver: FakeDriver, make_instance: MakeInstance) -> None:
    inst = make_instance(networks=[NetworkSpec(type="network", source="default"), NetworkSpec()])
    driver.spawn(inst)
    addrs = driver.get_interface_addresses(inst)
    assert len(addrs) == 2
    assert all(a.startswith("192.0.2.") and 1 <= int(a.rsplit(".", 1)[1]) <= 254 for a in addrs)
    assert driver.get_interface_addresses(inst) == addrs


def test_console_shows_the_guest_marker_after_each_boot(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    inst = make_instance(hostname="db-7")
    driver.spawn(inst)
    marker = f"{GUEST_READY_MARKER} hostname=db-7 instance-id={inst.uuid}"
    assert driver.get_console_output(inst).splitlines().count(marker) == 1
    driver.reboot(inst, "HARD")
    assert driver.get_console_output(inst).splitlines().count(marker) == 2


def test_fail_first_spawn_fails_once_per_host_and_leaves_nothing(
    driver: FakeDriver, state_dir: Path, make_instance: MakeInstance
) -> None:
    first, second = make_instance(), make_instance()
    failing = FakeDriver("compute-1", {"state_dir": str(state_dir), "failure_mode": "fail_first_spawn"})
    with pytest.raises(exceptions.RescheduledError, match="first spawn"):
        failing.spawn(first)
    assert failing.list_instances() == {}
    # Another process (a new driver object) sees that the first failure happened.
    again = FakeDriver("compute-1", {"state_dir": str(state_dir), "failure_mode": "fail_first_spawn"})
    again.spawn(first)
    again.spawn(second)
    assert set(again.list_instances()) == {first.uuid, second.uuid}


@pytest.mark.parametrize(
    ("mode", "error"),
    [("fail_every_spawn", exceptions.RescheduledError), ("abort_spawn", exceptions.BuildAbortError)],
)
def test_failing_modes_leave_nothing_behind(
    state_dir: Path, make_instance: MakeInstance, mode: str, error: type[Exception]
) -> None:
    drv = FakeDriver("compute-1", {"state_dir": str(state_dir), "failure_mode": mode})
    for _ in range(3):
        with pytest.raises(error):
            drv.spawn(make_instance())
    assert drv.list_instances() == {}
    assert drv.get_available_resource().cached_images == []
    assert json.loads(drv.state_file.read_text())["instances"] == {}


def test_failure_mode_per_host_from_environment(
    state_dir: Path, make_instance: MakeInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert failure_env_var("cmp-2.example") == "NOVAKIT_FAKE_FAILURE_CMP_2_EXAMPLE"
    monkeypatch.setenv("NOVAKIT_FAKE_FAILURE_CMP_2_EXAMPLE", "abort_spawn")
    bad = FakeDriver("cmp-2.example", {"state_dir": str(state_dir)})
    good = FakeDriver("cmp-3.example", {"state_dir": str(state_dir)})
    with pytest.raises(exceptions.BuildAbortError):
        bad.spawn(make_instance())
    good.spawn(make_instance())


def test_unknown_failure_mode_names_the_known_ones(state_dir: Path) -> None:
    with pytest.raises(exceptions.ConfigError, match="known modes: none, fail_first_spawn"):
        FakeDriver("compute-1", {"state_dir": str(state_dir), "failure_mode": "explode"})


def test_slow_spawn_waits_the_configured_delay(state_dir: Path, make_instance: MakeInstance) -> None:
    drv = FakeDriver(
        "compute-1", {"state_dir": str(state_dir), "failure_mode": "slow_spawn", "spawn_delay": 1.0}
    )
    inst = make_instance()
    seen_during_spawn: list[dict[str, PowerState]] = []
    worker = threading.Thread(target=drv.spawn, args=(inst,))
    worker.start()
    time.sleep(0.05)
    seen_during_spawn.append(drv.list_instances())
    worker.join()
    # While the slow spawn runs the host is not blocked, and the guest is not there yet.
    assert seen_during_spawn == [{}]
    assert drv.list_instances() == {inst.uuid: PowerState.RUNNING}


def test_crash_running_shows_a_crashed_guest_at_the_next_look(
    state_dir: Path, make_instance: MakeInstance
) -> None:
    drv = FakeDriver("compute-1", {"state_dir": str(state_dir), "failure_mode": "crash_running"})
    inst = make_instance()
    drv.spawn(inst)
    assert drv.get_info(inst).state is PowerState.CRASHED
    assert "Kernel panic" in drv.get_console_output(inst)
    drv.reboot(inst, "HARD")
    assert drv.list_instances() == {inst.uuid: PowerState.RUNNING}


def test_crash_and_vanish_helpers(driver: FakeDriver, make_instance: MakeInstance) -> None:
    a, b = make_instance(), make_instance()
    driver.spawn(a)
    driver.spawn(b)
    driver.crash(a.uuid)
    driver.vanish(b.uuid)
    assert driver.list_instances() == {a.uuid: PowerState.CRASHED}
    with pytest.raises(exceptions.InstanceNotFound):
        driver.get_info(b)
    driver.power_on(a)
    assert driver.get_info(a).state is PowerState.RUNNING


def _spawn_many(state_dir: str, worker: int, count: int) -> None:
    from novakit.host.messages import FlavorSpec, ImageSpec

    drv = FakeDriver("shared-host", {"state_dir": state_dir})
    for i in range(count):
        drv.spawn(
            InstanceSpec(
                uuid=str(uuidlib.uuid4()),
                name=f"w{worker}-{i}",
                hostname=f"w{worker}-{i}",
                project_id="p",
                user_id="u",
                flavor=FlavorSpec(name="m1.tiny", vcpus=1, memory_mb=64, root_gb=1),
                image=ImageSpec(id=f"img-{worker}"),
            )
        )


def test_four_processes_spawning_into_one_host_lose_nothing(state_dir: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_spawn_many, args=(str(state_dir), w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    drv = FakeDriver("shared-host", {"state_dir": str(state_dir)})
    assert len(drv.list_instances()) == 100
    res = drv.get_available_resource()
    assert (res.vcpus_used, res.memory_mb_used) == (100, 6400)
    assert res.cached_images == ["img-0", "img-1", "img-2", "img-3"]
    # No temporary files are left next to the state file.
    assert sorted(p.name for p in state_dir.iterdir()) == ["shared-host.json", "shared-host.lock"]


def test_threads_power_cycling_concurrently_keep_a_consistent_file(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    guests = [make_instance() for _ in range(8)]
    errors: list[BaseException] = []

    def cycle(inst: InstanceSpec) -> None:
        try:
            driver.spawn(inst)
            for _ in range(5):
                driver.power_off(inst)
                driver.power_on(inst)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(g,)) for g in guests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert driver.list_instances() == {g.uuid: PowerState.RUNNING for g in guests}


def test_cache_image_lists_the_image_as_cached(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from novakit.host.messages import ImageSpec
    from novakit.virt.fake import FakeDriver

    driver = FakeDriver("host-a", {"state_dir": str(tmp_path)})
    assert driver.get_available_resource().cached_images == []
    image = ImageSpec(id="1e0d7c3a-6c43-4a55-9a2e-6f6a1f1d7b90", name="tiny")
    driver.cache_image(image)
    driver.cache_image(image)  # idempotent
    assert driver.get_available_resource().cached_images == [image.id]


@pytest.mark.parametrize("option,traits", [(None, ["CUSTOM_ADMIN_PASSWORD"]), ("false", []), (False, [])])
def test_the_admin_password_capability_is_reported_as_a_trait(
    state_dir: Path, option: object, traits: list[str]
) -> None:
    options: dict[str, object] = {"state_dir": str(state_dir)}
    if option is not None:
        options["supports_admin_password"] = option  # text as the CLI's --option gives it, or a bool
    assert FakeDriver("compute-1", options).get_available_resource().traits == traits


def test_a_guest_with_a_config_drive_records_its_password_hash(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    hashed = "$6$saltsaltsaltsalt$" + "d" * 86
    with_drive = make_instance(admin_password_hash=SecretStr(hashed))
    without = make_instance(admin_password_hash=SecretStr(hashed), config_drive=False)
    driver.spawn(with_drive)
    driver.spawn(without)
    guests = json.loads(driver.state_file.read_text())["instances"]
    assert guests[with_drive.uuid]["admin_password_hash"] == hashed
    assert "admin_password_hash" not in guests[without.uuid]
    console = driver.get_console_output(with_drive).splitlines()
    assert admin_password_line(hashed) in console and hashed not in "\n".join(console)


def test_nics_with_fixed_ips_show_them_and_others_get_invented_ones(
    driver: FakeDriver, make_instance: MakeInstance
) -> None:
    inst = make_instance(
        hostname="app-3",
        networks=[
            NetworkSpec(
                type="network",
                source="tenant",
                mac="fa:16:3e:00:00:01",
                fixed_ips=[FixedIp(address="10.0.0.5", cidr="10.0.0.0/24", gateway="10.0.0.1")],
            ),
            NetworkSpec(type="network", source="default"),
        ],
    )
    driver.spawn(inst)
    addrs = driver.get_interface_addresses(inst)
    assert addrs[0] == "10.0.0.5" and addrs[1].startswith("192.0.2.") and len(addrs) == 2
    marker = f"{GUEST_READY_MARKER} hostname=app-3 instance-id={inst.uuid} addresses=10.0.0.5/24"
    assert marker in driver.get_console_output(inst).splitlines()


def test_a_host_reports_every_network_unless_its_options_name_some(state_dir: Path) -> None:
    assert FakeDriver("c1", {"state_dir": str(state_dir)}).get_available_resource().networks is None
    named = FakeDriver("c2", {"state_dir": str(state_dir), "networks": "tenant, br-data"})
    assert named.get_available_resource().networks == ["br-data", "tenant"]
    none = FakeDriver("c3", {"state_dir": str(state_dir), "networks": []})
    assert none.get_available_resource().networks == []
