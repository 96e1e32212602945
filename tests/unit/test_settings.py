"""Settings: the fleet slot of fleet-scope policies, from flag, environment or default, and its wiring."""

from __future__ import annotations

import pytest

from schemas.errors import ConfigError
from services.policy.specs import default_registry
from services.settings import Settings
from services.triggers import EverySeconds


class TestFleetSlot:
    def test_default_is_sixty_seconds(self) -> None:
        assert Settings.load({}, {}).fleet_slot_s == 60.0

    def test_environment_sets_it_and_a_flag_wins(self) -> None:
        environ = {"GOVERNOR_FLEET_SLOT_S": "10"}
        assert Settings.load({}, environ).fleet_slot_s == 10.0
        assert Settings.load({"fleet_slot_s": "15"}, environ).fleet_slot_s == 15.0

    @pytest.mark.parametrize("value", ["0", "-5"])
    def test_non_positive_slot_is_refused_naming_field_value_and_source(self, value: str) -> None:
        with pytest.raises(ConfigError, match=f"fleet_slot_s='{value}' from environment GOVERNOR_FLEET_SLOT_S"):
            Settings.load({}, {"GOVERNOR_FLEET_SLOT_S": value})

    def test_registry_decides_fleetopt_on_the_given_slot(self) -> None:
        assert default_registry().get("fleetopt").trigger == EverySeconds(seconds=60.0)
        assert default_registry(fleet_slot_s=10.0).get("fleetopt").trigger == EverySeconds(seconds=10.0)
