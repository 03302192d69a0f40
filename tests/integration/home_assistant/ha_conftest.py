"""pytest-homeassistant-custom-component's fixtures (hass, verify_cleanup, freezer ...): the
project's conftest.py, as tests/integration/test_home_assistant.py copies it."""

import pytest

pytest_plugins = ("pytest_homeassistant_custom_component",)


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(enable_custom_integrations: None) -> None:
    """Let hass load custom_components/."""
