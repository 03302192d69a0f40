"""The tests of virtual time (aiowheel/_virtual/) and its public API, aiowheel.testing."""
