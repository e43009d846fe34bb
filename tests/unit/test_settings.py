from __future__ import annotations

from typing import Any

import pytest

from pytest_cudaperf.settings import OPTIONS, SettingError, resolve


class FakeConfig:
    def __init__(self, cli: dict[str, Any] | None = None, ini: dict[str, str] | None = None):
        self.cli = cli or {}
        self.ini = ini or {}

    def getoption(self, name: str) -> Any:
        return self.cli.get(name)

    def getini(self, name: str) -> Any:
        return self.ini.get(name)


def test_defaults() -> None:
    settings = resolve(FakeConfig(), {}, "pytest.ini")
    assert settings.device == "auto"
    assert settings.tolerance == 0.05
    assert settings.update is False
    assert settings.sources["device"] == "default"


def test_precedence_cli_over_env_over_ini() -> None:
    ini = {"cudaperf_device": "cpu", "cudaperf_tolerance": "2%", "cudaperf_cache": "hot"}
    env = {"PYTEST_CUDAPERF_DEVICE": "cuda", "PYTEST_CUDAPERF_TOLERANCE": "0.03"}
    cli = {"cudaperf_device": "auto"}
    settings = resolve(FakeConfig(cli, ini), env, "pyproject.toml")
    assert settings.device == "auto"  # CLI
    assert settings.tolerance == pytest.approx(0.03)  # env
    assert settings.cache == "hot"  # ini
    assert "PYTEST_CUDAPERF_TOLERANCE" in settings.sources["tolerance"]


def test_flags_default_none_differs_from_false() -> None:
    env = {"PYTEST_CUDAPERF_STRICT": "yes"}
    assert resolve(FakeConfig(), env, "x").strict is True
    assert resolve(FakeConfig(ini={"cudaperf_strict": "False"}), {}, "x").strict is False


def test_bad_ini_value_names_option_and_file() -> None:
    with pytest.raises(SettingError) as excinfo:
        resolve(FakeConfig(ini={"cudaperf_device": "gpu0"}), {}, "pyproject.toml")
    assert str(excinfo.value) == (
        "--cudaperf-device: expected auto, cuda or cpu, got 'gpu0' "
        "(from pyproject.toml [cudaperf_device])"
    )


def test_bad_env_value_names_variable() -> None:
    with pytest.raises(SettingError, match=r"--cudaperf-tolerance: .*PYTEST_CUDAPERF_TOLERANCE"):
        resolve(FakeConfig(), {"PYTEST_CUDAPERF_TOLERANCE": "fast"}, "x")


def test_bad_cli_value() -> None:
    with pytest.raises(SettingError, match=r"--cudaperf-max-time: .* command line"):
        resolve(FakeConfig({"cudaperf_max_time": "-3"}), {}, "x")


def test_remeasure_is_auto_or_off() -> None:
    assert resolve(FakeConfig(), {}, "x").remeasure == "auto"
    assert resolve(FakeConfig(), {"PYTEST_CUDAPERF_REMEASURE": "off"}, "x").remeasure == "off"
    with pytest.raises(SettingError, match=r"--cudaperf-remeasure: .*'never'"):
        resolve(FakeConfig({"cudaperf_remeasure": "never"}), {}, "x")


def test_rounds_is_a_whole_number_of_at_least_one() -> None:
    assert resolve(FakeConfig(), {}, "x").rounds == 3
    assert resolve(FakeConfig(ini={"cudaperf_rounds": "1"}), {}, "x").rounds == 1
    assert resolve(FakeConfig({"cudaperf_rounds": "100"}), {}, "x").rounds == 100
    for bad in ("0", "two", "1.5", "101", "1000000"):
        with pytest.raises(SettingError) as excinfo:
            resolve(FakeConfig({"cudaperf_rounds": bad}), {}, "x")
        assert str(excinfo.value) == (
            f"--cudaperf-rounds: expected a whole number from 1 to 100, got {bad!r} "
            "(from the command line)"
        )


def test_cpu_threads_are_a_thread_count_or_auto() -> None:
    assert resolve(FakeConfig(), {}, "x").cpu_threads == 1
    assert resolve(FakeConfig({"cudaperf_cpu_threads": "auto"}), {}, "x").cpu_threads == 0
    assert resolve(FakeConfig({"cudaperf_cpu_threads": "4096"}), {}, "x").cpu_threads == 4096
    for bad in ("-1", "two", "4097", "3000000000"):  # torch would start them, or overflow
        with pytest.raises(SettingError) as excinfo:
            resolve(FakeConfig({"cudaperf_cpu_threads": bad}), {}, "x")
        assert str(excinfo.value) == (
            f"--cudaperf-cpu-threads: expected a whole number from 1 to 4096, or auto, got "
            f"{bad!r} (from the command line)"
        )


def test_round_of_is_off_or_a_round_count_of_at_least_two() -> None:
    assert resolve(FakeConfig(), {}, "x").round_of == 0
    assert resolve(FakeConfig({"cudaperf_round_of": "3"}), {}, "x").round_of == 3
    assert resolve(FakeConfig(), {"PYTEST_CUDAPERF_ROUND_OF": "off"}, "x").round_of == 0
    for bad in ("1", "three"):
        with pytest.raises(SettingError) as excinfo:
            resolve(FakeConfig({"cudaperf_round_of": bad}), {}, "x")
        assert str(excinfo.value) == (
            f"--cudaperf-round-of: expected off or a whole number >= 2, got {bad!r} "
            "(from the command line)"
        )


def test_prune_needs_update() -> None:
    with pytest.raises(SettingError, match="--cudaperf-prune"):
        resolve(FakeConfig({"cudaperf_prune": True}), {}, "x")


def test_every_option_has_ini_and_env_twins() -> None:
    for option in OPTIONS:
        assert option.cli == "--cudaperf-" + option.name
        assert option.ini == "cudaperf_" + option.name.replace("-", "_")
        assert option.env.startswith("PYTEST_CUDAPERF_")


@pytest.mark.parametrize("given", ["5", "2", "1"])
def test_a_bare_tolerance_of_one_or_more_is_refused_with_a_percentage(given: str) -> None:
    with pytest.raises(SettingError) as excinfo:
        resolve(FakeConfig({"cudaperf_tolerance": given}), {}, "x")
    assert str(excinfo.value).startswith("--cudaperf-tolerance: a bare number is a fraction")
    assert f"did you mean '{given}%'?" in str(excinfo.value)
    assert resolve(FakeConfig({"cudaperf_tolerance": f"{given}%"}), {}, "x").tolerance == (
        pytest.approx(int(given) / 100)
    )


def test_the_seed_takes_a_whole_number_or_off() -> None:
    assert resolve(FakeConfig(), {}, "x").seed == 0
    assert resolve(FakeConfig({"cudaperf_seed": "1234"}), {}, "x").seed == 1234
    assert resolve(FakeConfig(), {"PYTEST_CUDAPERF_SEED": "off"}, "x").seed is None
    assert resolve(FakeConfig({"cudaperf_seed": "4294967295"}), {}, "x").seed == 2**32 - 1
    for bad in ("-1", "1.5", "random", "4294967296"):  # NumPy's generator takes 32 bits
        with pytest.raises(SettingError) as excinfo:
            resolve(FakeConfig(ini={"cudaperf_seed": bad}), {}, "pytest.ini")
        assert str(excinfo.value) == (
            f"--cudaperf-seed: expected a whole number from 0 to 4294967295, or off, got {bad!r} "
            "(from pytest.ini [cudaperf_seed])"
        )


def test_the_state_wait_takes_seconds_or_off() -> None:
    assert resolve(FakeConfig(), {}, "x").state_wait == 15.0
    assert resolve(FakeConfig({"cudaperf_state_wait": "10s"}), {}, "x").state_wait == 10.0
    assert resolve(FakeConfig(ini={"cudaperf_state_wait": "500ms"}), {}, "x").state_wait == 0.5
    for off in ("off", "OFF", "0"):
        assert resolve(FakeConfig({"cudaperf_state_wait": off}), {}, "x").state_wait == 0.0
    with pytest.raises(SettingError) as excinfo:
        resolve(FakeConfig({"cudaperf_state_wait": "-5"}), {}, "x")
    assert str(excinfo.value) == (
        "--cudaperf-state-wait: expected seconds such as 30 or 30s, or off, got '-5' "
        "(from the command line)"
    )
