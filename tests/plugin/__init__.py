"""The tests of the pytest plugin (aiowheel/_plugin/, aiowheel.pytest)."""
