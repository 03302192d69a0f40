"""The tests of the driver's rooms (aiowheel/_time/)."""
