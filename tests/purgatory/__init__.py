"""The tests of the purgatory and its signals (aiowheel/_purgatory/)."""
